"""Hostile input: malformed records of every kind on every topic a service consumes, and
schemathesis (all checks) against one replica's API, under the placement load."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import decode
from fairlane_events.records import DeadLetter
from fairlane_events.topics import DEAD_LETTER, GPU_SCORES, NODE_SAMPLES, PLACEMENTS
from tests.chaos.audit import read_topic, scrape, wait_until
from tests.chaos.context import Context
from tests.chaos.report import Row
from tests.node_keys import signed

__all__ = ["hostile_input"]

Bad = tuple[bytes, bytes | None]  # key, value

_SAMPLE: dict[str, Any] = {
    "schema": "node-sample/1",
    "node": "hostile-0000",
    "ts_ms": 1_700_000_000_000,
    "source": "sim",
    "gpus": [{"uuid": "GPU-hostile-0", "index": 0, "model": "Tesla V100-SXM2-32GB"}],
}
_PLACEMENT: dict[str, Any] = {
    "schema": "placement/1",
    "placement_id": "hostile-p",
    "job_id": "hostile-j",
    "namespace": "default",
    "event": "created",
    "ts_ms": 1_700_000_000_000,
    "nodes": [],
}
_SCORE: dict[str, Any] = {
    "schema": "gpu-score/1",
    "node": "hostile-0000",
    "uuid": "GPU-hostile-0",
    "index": 0,
    "model": "V100",
    "score": 0.9,
    "speed": 1.0,
    "effective_capacity": 0.9,
    "components": {},
    "samples_in_window": 1,
    "stale": False,
    "ts_ms": 1_700_000_000_000,
}


def _with(record: dict[str, Any], path: str, value: object) -> bytes:
    """``record`` with the field at dotted ``path`` set (``...`` deletes it)."""
    out = copy.deepcopy(record)
    *parents, last = path.split(".")
    target: Any = out
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return json.dumps(out).encode()


def _garbage(template: dict[str, Any]) -> list[bytes | None]:
    """Kinds of bad bytes that fit no schema at all."""
    good = json.dumps(template)
    return [
        None,  # a tombstone
        b"",
        b"not json",
        b"\xff\xfe\x00 invalid utf-8",
        b"[]",
        b"null",
        b"42",
        good[: len(good) // 2].encode(),  # truncated
        good.replace("}", ', "ts_ms": NaN}', 1).encode(),
        b'{"schema": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # deep nesting
        json.dumps({**template, "padding": "x" * 200_000}).encode(),  # large, extra field
        _with(template, "schema", template["schema"][:-1] + "9"),  # unknown major version
        _with(template, "ts_ms", True),
        _with(template, "ts_ms", "1700000000000"),
        _with(template, "ts_ms", -1),
        _with(template, "ts_ms", 1e400),
    ]


def _bad_samples() -> list[Bad]:
    key = b"hostile-0000"
    overfull = json.loads(_with(_SAMPLE, "gpus.0.mem_used_bytes", 10))
    values = [
        *_garbage(_SAMPLE),
        _with(_SAMPLE, "gpus", []),
        _with(_SAMPLE, "gpus", [_SAMPLE["gpus"][0], _SAMPLE["gpus"][0]]),  # uuid twice
        _with(_SAMPLE, "gpus.0.gpu_util_pct", True),
        _with(_SAMPLE, "gpus.0.gpu_util_pct", 250),
        _with(_SAMPLE, "gpus.0.temp_c", -300),
        _with(_SAMPLE, "gpus.0.slowdown_temp_c", -5),
        _with(_SAMPLE, "gpus.0.index", -1),
        _with(_SAMPLE, "gpus.0.uuid", ""),
        _with(overfull, "gpus.0.mem_total_bytes", 1),  # used > total
        _with(_SAMPLE, "source", "nvml; DROP TABLE"),
        _with(_SAMPLE, "node", "x" * 10_000),
    ]
    return [*((key, v) for v in values), (b"another-node", json.dumps(_SAMPLE).encode())]


def _bad_placements() -> list[Bad]:
    values = [
        *_garbage(_PLACEMENT),
        _with(_PLACEMENT, "event", "exploded"),
        _with(_PLACEMENT, "nodes", [{"node": "hostile-0000"}]),
        _with(_PLACEMENT, "nodes", "all of them"),
        _with(_PLACEMENT, "placement_id", None),
    ]
    return [(b"hostile-p", v) for v in values]


def _bad_scores() -> list[Bad]:
    values = [
        *_garbage(_SCORE),
        _with(_SCORE, "score", 1.5),
        _with(_SCORE, "score", True),
        _with(_SCORE, "stale", "no"),
        _with(_SCORE, "effective_capacity", -1),
    ]
    # Not None: a tombstone on the compacted topic is a legitimate delete.
    return [(b"GPU-hostile-0", v) for v in values if v is not None]


def _headers(topic: str, key: bytes | None, value: bytes | None) -> list[tuple[str, bytes]] | None:
    if topic != NODE_SAMPLES or key is None or value is None:
        return None
    return signed(key, value)


async def _produce(bootstrap: str, topic: str, records: list[Bad]) -> set[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000)
    await producer.start()
    try:
        # Node samples go signed, as a node's agent would sign them: the decoder is the
        # target here (tests/integration/test_scorer_signatures.py: unsigned ones).
        sent = [
            await producer.send_and_wait(topic, value=v, key=k, headers=_headers(topic, k, v))
            for k, v in records
        ]
    finally:
        await producer.stop()
    return {(m.partition, m.offset) for m in sent}


async def _dead_lettered(bootstrap: str, topic: str, where: set[tuple[int, int]]) -> int:
    found = 0
    for record in await read_topic(bootstrap, DEAD_LETTER):
        letter = decode(DeadLetter, record.value)
        found += letter.source_topic == topic and (letter.partition, letter.offset) in where
    return found


def _schemathesis(ctx: Context) -> tuple[int, str]:
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{ctx.stack.api(0)}/openapi.json",
            *("--header", f"Authorization: {ctx.stack.auth['Authorization']}"),
            *("--checks", "all", "--exclude-checks", "use_after_free"),
            *("--max-examples", str(ctx.plan.fuzz_examples)),
            *("--seed", os.environ.get("FAIRLANE_FUZZ_SEED", "20261130"), "--no-color"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return done.returncode, _failures(done.stdout)


def _failures(report: str) -> str:
    """schemathesis's FAILURES section (each operation, check and the curl that repeats
    it), or the report's tail when it has none: the tail alone said only how many."""
    start, end = report.find("= FAILURES ="), report.find("= SUMMARY =")
    return report[start:end][-4000:] if 0 <= start < end else report[-1500:]


async def _undo_policy(database_url: str) -> str:
    """Remove the quotas and cordons the fuzzer set, as an admin would after a test: it
    acts as the admin, and a quota it put on the load's namespace refused every later
    placement of the full run with 403 (2,220 of them), so the rows after it tested
    nothing. What it set is said in the row."""
    conn = await asyncpg.connect(database_url)
    try:
        quotas = await conn.fetch("DELETE FROM quotas RETURNING namespace, max_gpus")
        cordons = await conn.fetch("DELETE FROM cordons RETURNING node")
    finally:
        await conn.close()
    set_quotas = ", ".join(f"{q['namespace']} (max_gpus {q['max_gpus']})" for q in quotas)
    return (
        f"undone after fuzzing: {len(quotas)} quotas{': ' + set_quotas if quotas else ''}, "
        f"{len(cordons)} cordons"
    )


def hostile_input(ctx: Context) -> Row:
    row = Row("Hostile input (Kafka records + API fuzzing)")
    before = ctx.loads()
    stack = ctx.stack
    scorer_url, agent_url = f"{stack.scorer_url}/metrics", f"{stack.agent_url}/metrics"
    dead0 = scrape(scorer_url)["fairlane_scorer_dead_lettered_total"]
    skipped0 = scrape(agent_url)["fairlane_agent_placements_skipped_total"]
    samples, placements, scores = _bad_samples(), _bad_placements(), _bad_scores()
    sizes = ctx.log_sizes()
    at_samples = asyncio.run(_produce(stack.bootstrap, NODE_SAMPLES, samples))
    at_placements = asyncio.run(_produce(stack.bootstrap, PLACEMENTS, placements))
    asyncio.run(_produce(stack.bootstrap, GPU_SCORES, scores))
    sent = time.monotonic()
    want = len(samples) + len(placements)

    def counted() -> bool:
        return scrape(scorer_url)["fairlane_scorer_dead_lettered_total"] - dead0 >= want

    wait_until(counted, 60)
    dead = scrape(scorer_url)["fairlane_scorer_dead_lettered_total"] - dead0
    wait_until(lambda: scrape(agent_url)["fairlane_agent_placements_skipped_total"] > skipped0, 30)
    skipped = scrape(agent_url)["fairlane_agent_placements_skipped_total"] - skipped0
    on_topic = asyncio.run(_dead_lettered(stack.bootstrap, NODE_SAMPLES, at_samples))
    on_topic += asyncio.run(_dead_lettered(stack.bootstrap, PLACEMENTS, at_placements))

    def ignored_by_replica() -> dict[str, int]:
        logged = ctx.logged_since(sizes)
        return {n: t.count("ignored bad score record") for n, t in logged.items()}

    wait_until(lambda: min(ignored_by_replica().values()) >= len(scores), 30)
    ignored = ignored_by_replica()
    rc, fuzz_tail = _schemathesis(ctx)
    undone = asyncio.run(_undo_policy(stack.database_url))
    row.injected = (
        f"{len(samples)} bad node samples, {len(placements)} bad placement events, "
        f"{len(scores)} bad scores; schemathesis all checks, {ctx.plan.fuzz_examples} "
        "examples per operation"
    )
    row.notes.append(
        f"scorer dead-lettered {dead:.0f}/{want} (on the topic: {on_topic}), agent skipped "
        f"{skipped:.0f}/{len(placements)} placements, each replica logged and ignored "
        f"{sorted(set(ignored.values()))} of {len(scores)} bad scores, schemathesis exit {rc}; "
        + undone
    )
    row.check(dead == want, f"scorer counted {dead:.0f} of {want} bad records")
    row.check(on_topic == want, f"{on_topic} of {want} bad records on the dead-letter topic")
    row.check(skipped == len(placements), f"agent counted {skipped:.0f} bad placements")
    row.check(
        all(n == len(scores) for n in ignored.values()), f"replicas ignored {ignored} bad scores"
    )
    row.check(rc == 0, "schemathesis found failures: " + fuzz_tail)
    ctx.finish(row, sent, before, allowed=("POST 403",))  # while the fuzzer's quotas stood
    return row
