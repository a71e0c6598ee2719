"""Telemetry that lies (issue 35), sent at the running fleet: samples of a node that is
not who it says (unsigned, or signed with another cluster's ring), of a node with a key
naming GPUs that are not its own, a real node's old record replayed, and one node's
flood. Their rows are in telemetry_rows.py; this is the one pass they share.

Everything is sent at once and the pass waits once: the scorer judges each record on
its own, and each attack sits under a node of its own (the replay under a real one), so
none masks another. The lies name every GPU of the nodes where the load holds the most
GPUs now, fully busy and 5 C above their slowdown temperature: taken for true, their
scores would fall below the placement threshold and the replicas would announce the
placements degraded, as the issue's forged sample did in under a second. The pass then
keeps what the rows judge: the records' dead letters, the score records and placement
events since it began, and the scorer's counters before and after."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.gpu_models import CATALOG
from fairlane_events.records import DeadLetter, GpuSample, GpuScore, NodeSample, PlacementEvent
from fairlane_events.signing import SIGNATURE_HEADER, RingSigner, parse_key_ring
from fairlane_events.topics import DEAD_LETTER, GPU_SCORES, NODE_SAMPLES, PLACEMENTS
from tests.chaos.audit import end_offsets, read_topic, scrape, wait_until
from tests.chaos.context import Context
from tests.chaos.stack import UNPLACED_MODEL, ChaosStack
from tests.chaos.sustained import rss_mib
from tests.node_keys import TEST_KEY_RING, signed
from tests.node_samples import first_records
from tests.scorer_harness import now_ms

__all__ = [
    "FLOOD",
    "FLOOD_RECORDS",
    "FLOOD_STEP_MS",
    "FORGED",
    "FORGED_UNSIGNED",
    "REFUSED",
    "ROGUE",
    "SPACING_MS",
    "UNVERIFIED",
    "Attack",
    "attack",
    "labelled",
]

#: Outside the fleet's prefix, so that the sample audit and the parity check, which read
#: the fleet's nodes only, leave them out.
FORGED, ROGUE, FLOOD = "forged-node", "rogue-node", "flood-node"
FORGED_UNSIGNED, ROGUE_RECORDS = 3, 3  # and one forged sample of another cluster's ring
FLOOD_RECORDS, FLOOD_STEP_MS = 5_000, 1
#: The lies' samples apart in sample time: above the rate bound, so that only the
#: identity checks can refuse them.
LIE_STEP_MS = 2_000
TARGET_NODES = 2
#: The scorer's FAIRLANE_SAMPLE_MIN_SPACING_S (its default, which the stack keeps).
SPACING_MS = 1_000
#: How long the pass waits for the scorer to judge everything sent, and for every node
#: of the fleet to be scored again after the flood began (a GPU whose score does not
#: move is published once a heartbeat, 10 s here).
PROCESS_TIMEOUT_S, FLEET_SCORED_S = 60.0, 30.0
#: The replicas look for degraded GPUs every second (expiry_interval_s): a few rounds.
DEGRADED_ROUNDS_S = 3.0
#: The same key id as the tests' ring, another secret: what a node of another cluster
#: sends (the scorer's reason: mismatch; an unknown id would be caught by the id alone).
_OTHER_CLUSTER = RingSigner(
    parse_key_ring(f"{parse_key_ring(TEST_KEY_RING.read_text()).current} {secrets.token_hex(32)}")
)

Origin = tuple[int, int]  # (partition, offset) on the node-samples topic
Raw = tuple[bytes, bytes, list[tuple[str, bytes]] | None]  # key, value, headers
UNVERIFIED = "fairlane_scorer_samples_unverified_total"
REFUSED = "fairlane_scorer_samples_refused_total"
LAG = "fairlane_scorer_consumer_lag"


def labelled(metric: str, **labels: str) -> str:
    """A key of :func:`~tests.chaos.audit.scrape`'s answer."""
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@dataclass(frozen=True)
class Attack:
    """What was sent (the origins of each attack's records) and what came of it."""

    targets: dict[str, str]  # GPU uuid -> its node
    forged: list[Origin]
    rogue: list[Origin]
    lies_ts_ms: set[int]  # the forged and colliding samples' times
    replay: Origin
    replay_node: str
    replay_ts_ms: int
    replay_age_s: float  # how far behind the wall clock the replayed record was
    flood: list[Origin]
    flood_sent_s: float
    flood_began_ms: int
    recovery_s: float | None  # from the flood's last record until all was judged
    fleet_scored_s: float | None  # from the flood's start until every node scored again
    rss_mib: tuple[float, float]  # the scorer's, before and at its peak
    before: dict[str, float]
    after: dict[str, float]
    letters: dict[Origin, str]  # the dead letters of node samples since: error by origin
    scores: list[GpuScore]  # score records since the pass began
    degraded: list[PlacementEvent]  # degraded events since that only a lie explains

    def delta(self, metric: str) -> float:
        return self.after.get(metric, 0.0) - self.before.get(metric, 0.0)

    def lettered(self, origins: Sequence[Origin], reason: str) -> int:
        """How many of these records are dead-lettered with ``reason``."""
        return sum(self.letters.get(o, "").startswith(f"{reason}: ") for o in origins)

    def scores_of(self, node: str) -> int:
        return sum(s.node == node for s in self.scores)

    @property
    def scores_changed(self) -> int:
        """Score records of a targeted GPU under another node than its own, or of a lie's
        time: a lie that was scored."""
        return sum(
            s.uuid in self.targets
            and (s.node != self.targets[s.uuid] or s.ts_ms in self.lies_ts_ms)
            for s in self.scores
        )


def attack(ctx: Context) -> Attack:
    """The pass, run by the first of its rows; the others find it in ``ctx``."""
    done = ctx.shared.get("telemetry")
    if not isinstance(done, Attack):
        done = ctx.shared["telemetry"] = _attack(ctx)
    return done


async def _held_nodes(stack: ChaosStack) -> list[str]:
    """The fleet's nodes where the load holds the most GPUs now."""
    conn = await asyncpg.connect(stack.database_url)
    try:
        rows = await conn.fetch(
            "SELECT node FROM allocations WHERE live AND node LIKE $1 GROUP BY node "
            "ORDER BY count(*) DESC, node LIMIT $2",
            f"{stack.prefix}-%",
            TARGET_NODES,
        )
    finally:
        await conn.close()
    if not rows:
        raise RuntimeError("the load holds no GPU: nothing to lie about")
    return [r["node"] for r in rows]


def _lie(template: NodeSample, node: str, gpus: list[GpuSample], ts_ms: int) -> bytes:
    """A sample of ``node`` naming ``gpus``, each fully busy and hot."""
    hot = [
        g.model_copy(
            update={
                "index": i,
                "sm_active": 1.0,
                "gpu_util_pct": 100.0,
                "mem_util_pct": 100.0,
                "temp_c": (g.slowdown_temp_c or 90.0) + 5,
            }
        )
        for i, g in enumerate(gpus)
    ]
    return encode(template.model_copy(update={"node": node, "ts_ms": ts_ms, "gpus": hot}))


def _flood(template: NodeSample, started_ms: int) -> list[Raw]:
    """``FLOOD``'s samples of one GPU of its own, 1 ms apart, each signed by its node.
    The GPU is of the model the load never asks for, so that no placement lands on it
    (it turns stale once the flood is over)."""
    model = CATALOG[UNPLACED_MODEL].nvml_name
    update = {"uuid": f"GPU-{FLOOD}-0", "index": 0, "model": model}
    gpu = template.gpus[0].model_copy(update=update)
    key = FLOOD.encode()
    values = [
        encode(template.model_copy(update={"node": FLOOD, "ts_ms": ts, "gpus": [gpu]}))
        for ts in range(started_ms, started_ms + FLOOD_RECORDS * FLOOD_STEP_MS, FLOOD_STEP_MS)
    ]
    return [(key, v, signed(key, v)) for v in values]


async def _send(bootstrap: str, records: Sequence[Raw]) -> tuple[list[Origin], float]:
    """As fast as one producer goes (every record handed over, then one flush): the
    records' origins, and the seconds from the first send to the last acknowledgement."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=512 * 1024
    )
    await producer.start()
    try:
        began = time.monotonic()
        futures = [await producer.send(NODE_SAMPLES, v, key=k, headers=h) for k, v, h in records]
        await producer.flush()
        metas = [await f for f in futures]
        return [(m.partition, m.offset) for m in metas], time.monotonic() - began
    finally:
        await producer.stop()


async def _letters(bootstrap: str, mark: dict[int, int]) -> dict[Origin, str]:
    """The dead letters of node samples since ``mark``: each one's error by its origin."""
    letters = {}
    for record in await read_topic(bootstrap, DEAD_LETTER, mark):
        letter = decode(DeadLetter, record.value)
        if letter.source_topic == NODE_SAMPLES:
            letters[(letter.partition, letter.offset)] = letter.error
    return letters


async def _scores(bootstrap: str, mark: dict[int, int]) -> list[GpuScore]:
    """The score records since ``mark`` (tombstones, expired GPUs, left out)."""
    records = await read_topic(bootstrap, GPU_SCORES, mark)
    return [decode(GpuScore, r.value) for r in records if r.value is not None]


async def _real_scores(bootstrap: str, targets: dict[str, str]) -> set[tuple[str, float]]:
    """(uuid, score) of every score record a targeted GPU's own node ever had: what a
    genuine degraded event of it can say (the load heats held GPUs, which may throttle)."""
    real = set()
    for record in await read_topic(bootstrap, GPU_SCORES):
        try:
            score = decode(GpuScore, record.value)
        except DecodeError:
            continue  # a tombstone, or the hostile row's bad score records
        if targets.get(score.uuid) == score.node:
            real.add((score.uuid, score.score))
    return real


async def _degraded(
    bootstrap: str, mark: dict[int, int], targets: dict[str, str]
) -> list[PlacementEvent]:
    """The degraded events since ``mark`` that name a targeted GPU slow by a score its own
    node never reported: what only a lie could have caused."""
    real = await _real_scores(bootstrap, targets)
    found = []
    for record in await read_topic(bootstrap, PLACEMENTS, mark):
        try:
            event = decode(PlacementEvent, record.value)
        except DecodeError:
            continue  # no event of the outbox's: the audit judges the topic
        if event.event == "degraded" and any(
            g.uuid in targets and g.source == "score" and (g.uuid, g.speed) not in real
            for g in event.slow_gpus or []
        ):
            found.append(event)
    return found


def _lies(samples: list[NodeSample], t0_ms: int) -> list[Raw]:
    """The forged samples (unsigned, then one of another cluster's ring) and the
    colliding ones (signed by their node), each naming every GPU of ``samples``."""
    gpus = [g for s in samples for g in s.gpus]
    forged = [
        _lie(samples[0], FORGED, gpus, t0_ms + i * LIE_STEP_MS) for i in range(FORGED_UNSIGNED + 1)
    ]
    rogue = [
        _lie(samples[0], ROGUE, gpus, t0_ms + i * LIE_STEP_MS + 1) for i in range(ROGUE_RECORDS)
    ]
    key, other = FORGED.encode(), forged[-1]
    return [
        *((key, v, None) for v in forged[:-1]),
        (key, other, [(SIGNATURE_HEADER, _OTHER_CLUSTER.signature(FORGED, key, other))]),
        *((ROGUE.encode(), v, signed(ROGUE.encode(), v)) for v in rogue),
    ]


def _judged(ctx: Context, before: dict[str, float], flood: list[Origin]) -> Callable[[], bool]:
    """Whether the scorer has judged every record sent (its counters by reason), and the
    flood's partition is no further behind than one round of the fleet."""
    url = f"{ctx.stack.scorer_url}/metrics"
    refused = FLOOD_RECORDS - FLOOD_RECORDS * FLOOD_STEP_MS // SPACING_MS - 1
    need = {
        labelled(UNVERIFIED, reason="missing"): FORGED_UNSIGNED,
        labelled(UNVERIFIED, reason="mismatch"): 1,
        labelled(REFUSED, reason="quarantine"): ROGUE_RECORDS,
        labelled(REFUSED, reason="replay"): 1,
        labelled(REFUSED, reason="rate"): refused,
    }
    lag = labelled(LAG, partition=str(flood[0][0]))

    def judged() -> bool:
        m = scrape(url)
        done = all(m.get(k, 0) - before.get(k, 0) >= n for k, n in need.items())
        return done and m.get(lag, 0) <= ctx.stack.nodes

    return judged


def _attack(ctx: Context) -> Attack:
    stack = ctx.stack
    scorer = stack.services["scorer"]
    bootstrap, url, pid = stack.bootstrap, f"{stack.scorer_url}/metrics", scorer.pid
    marks = {
        t: asyncio.run(end_offsets(bootstrap, t)) for t in (DEAD_LETTER, GPU_SCORES, PLACEMENTS)
    }
    before, rss = scrape(url), [rss_mib(pid)]
    nodes = asyncio.run(_held_nodes(stack))
    firsts = asyncio.run(first_records(bootstrap, nodes))
    samples = [decode(NodeSample, firsts[n].value) for n in nodes]
    targets = {g.uuid: s.node for s in samples for g in s.gpus}
    # The replay: the first node's first record, signature and all, once the node has
    # moved on past the tolerance (at once but in a young stack: --only).
    old, old_ts_ms = firsts[nodes[0]], samples[0].ts_ms
    tolerance_s = float(scorer.env["FAIRLANE_REPLAY_TOLERANCE_S"])
    time.sleep(max(0.0, (old_ts_ms - now_ms()) / 1000 + tolerance_s + 2 * stack.interval_s))
    t0_ms = now_ms()
    lies = _lies(samples, t0_ms)
    sent, _ = asyncio.run(_send(bootstrap, [*lies, (old.key or b"", old.value, list(old.headers))]))
    ctx.injected.add(sent[-1])  # the replay is no sample of the agent's
    flood_began, flood_began_ms = time.monotonic(), now_ms()
    flood, flood_sent_s = asyncio.run(_send(bootstrap, _flood(samples[0], flood_began_ms)))
    judged = _judged(ctx, before, flood)

    def judged_meanwhile() -> bool:
        rss.append(rss_mib(pid))
        return judged()

    recovery_s = wait_until(judged_meanwhile, PROCESS_TIMEOUT_S, poll_s=0.2)
    judged_at = time.monotonic()
    fleet = f"{stack.prefix}-"

    def fleet_scored() -> bool:
        scores = asyncio.run(_scores(bootstrap, marks[GPU_SCORES]))
        fresh = {s.node for s in scores if s.node.startswith(fleet) and s.ts_ms >= flood_began_ms}
        return len(fresh) >= stack.nodes

    took = wait_until(fleet_scored, FLEET_SCORED_S, poll_s=2)
    fleet_scored_s = None if took is None else time.monotonic() - flood_began
    time.sleep(max(0.0, judged_at + DEGRADED_ROUNDS_S - time.monotonic()))
    rss.append(rss_mib(pid))
    n_lies = FORGED_UNSIGNED + 1
    return Attack(
        targets=targets,
        forged=sent[:n_lies],
        rogue=sent[n_lies : n_lies + ROGUE_RECORDS],
        lies_ts_ms={decode(NodeSample, v).ts_ms for _, v, _ in lies},
        replay=sent[-1],
        replay_node=nodes[0],
        replay_ts_ms=old_ts_ms,
        replay_age_s=(t0_ms - old_ts_ms) / 1000,
        flood=flood,
        flood_sent_s=flood_sent_s,
        flood_began_ms=flood_began_ms,
        recovery_s=recovery_s,
        fleet_scored_s=fleet_scored_s,
        rss_mib=(rss[0], max(rss)),
        before=before,
        after=scrape(url),
        letters=asyncio.run(_letters(bootstrap, marks[DEAD_LETTER])),
        scores=asyncio.run(_scores(bootstrap, marks[GPU_SCORES])),
        degraded=asyncio.run(_degraded(bootstrap, marks[PLACEMENTS], targets)),
    )
