"""sample -> Kafka -> Faust -> scores topic -> scheduler -> Postgres, nothing faked.

The agent and the scorer run as real processes; the scheduler runs in-process (its
lifespan starts exactly as under uvicorn) so the test can reach its fleet view.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from fastapi import FastAPI

from fairlane_events.codec import decode
from fairlane_events.records import DeadLetter
from fairlane_events.topics import DEAD_LETTER, NODE_SAMPLES
from fairlane_scheduler.api.deps import Runtime
from fairlane_scheduler.settings import SchedulerSettings
from tests.live_stack import pipeline_env
from tests.node_keys import signed
from tests.processes import free_port, service, wait_for_http
from tests.scheduler_harness import running_scheduler

pytestmark = pytest.mark.e2e

THRESHOLD = 0.65
SIM_MODELS = ("A100-80GB", "H100", "V100")  # the agent's default simulated fleet


@dataclass(frozen=True)
class Stack:
    bootstrap: str
    prefix: str  # node-name prefix of this stack's simulated fleet
    scorer_url: str


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    prefix = f"e2e-{os.getpid()}"
    env, scorer_env = pipeline_env(kafka_bootstrap, prefix, tmp)
    web_port = scorer_env["FAIRLANE_WEB_PORT"]
    agent_args = ["--nodes", "3", "--node-prefix", prefix, "--degraded-fraction", "0.25"]
    agent_args += ["--seed", "11", "--metrics-port", "0", "--backend", "sim"]
    with (
        service("fairlane_scorer", [], scorer_env, tmp / "scorer.log") as scorer,
        service("fairlane_agent", agent_args, env, tmp / "agent.log"),
    ):
        url = f"http://127.0.0.1:{web_port}"
        wait_for_http(f"{url}/healthz", scorer, tmp / "scorer.log")
        yield Stack(kafka_bootstrap, prefix, url)


@asynccontextmanager
async def scheduler(
    stack: Stack, database_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    settings = SchedulerSettings(
        kafka_bootstrap_servers=stack.bootstrap,
        database_url=database_url,
        stale_after_s=30,
        auth_disabled=True,
    )
    async with running_scheduler(settings) as (client, app):
        yield client, app


async def eventually(check: Callable[[], object], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout_s}s: {check}")
        await asyncio.sleep(0.5)


def our_gpus(app: FastAPI, stack: Stack) -> dict[str, float]:
    runtime: Runtime = app.state.runtime
    return {g.uuid: g.score for g in runtime.fleet.gpus.values() if g.node.startswith(stack.prefix)}


async def ready_with_our_fleet(client: httpx.AsyncClient, app: FastAPI, stack: Stack) -> None:
    async def ready() -> bool:
        return (await client.get("/readyz")).status_code == 200

    deadline = time.monotonic() + 90
    while not (await ready() and len(our_gpus(app, stack)) == 24):
        assert time.monotonic() < deadline, (await client.get("/readyz")).json()
        await asyncio.sleep(0.5)


async def test_a_sample_becomes_a_stored_placement_on_healthy_gpus(
    stack: Stack, database_url: str
) -> None:
    async with scheduler(stack, database_url) as (client, app):
        await ready_with_our_fleet(client, app, stack)
        # The degraded GPUs of the simulated fleet must have fallen below the threshold.
        await eventually(lambda: any(s < THRESHOLD for s in our_gpus(app, stack).values()))
        # The simulated fleet's models only: other tests publish scores of other models.
        request = {"job_id": "e2e-1", "gpus_per_node": 4, "models": list(SIM_MODELS)}
        answer = await client.post("/v1/placements", json=request)
        assert answer.status_code == 201, answer.text
        body = answer.json()
        (node,) = body["nodes"]
        # Any fresh GPU of these models may be chosen, ours or another test's fleet's.
        fleet: Runtime = app.state.runtime
        scores = {g.uuid: g.score for g in fleet.fleet.gpus.values()}
        chosen = [g["uuid"] for g in node["gpus"]]
        assert all(scores[u] >= THRESHOLD for u in chosen)
        assert node["cuda_visible_devices"] == ",".join(str(g["index"]) for g in node["gpus"])
        assert node["master_port"] == 29500
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow("SELECT * FROM placements WHERE job_id = 'e2e-1'")
        allocations = await conn.fetch(
            "SELECT gpu_uuid, score FROM allocations WHERE placement_id = $1 AND live", row["id"]
        )
    finally:
        await conn.close()
    assert str(row["id"]) == body["id"]
    assert sorted(a["gpu_uuid"] for a in allocations) == sorted(chosen)
    assert all(a["score"] >= THRESHOLD for a in allocations)


async def test_restarted_scheduler_keeps_placements_and_rebuilds_scores(
    stack: Stack, database_url: str
) -> None:
    async with scheduler(stack, database_url) as (client, app):
        await ready_with_our_fleet(client, app, stack)
        request = {"job_id": "r-1", "gpus_per_node": 2, "models": list(SIM_MODELS)}
        placed = await client.post("/v1/placements", json=request)
        assert placed.status_code == 201, placed.text
    async with scheduler(stack, database_url) as (client, app):
        # A brand-new fleet view, rebuilt from the compacted scores topic.
        await ready_with_our_fleet(client, app, stack)
        again = await client.get(f"/v1/placements/{placed.json()['id']}")
        assert again.status_code == 200
        assert again.json() == placed.json()
        replay = await client.post("/v1/placements", json=request)
        assert replay.status_code == 200
        assert replay.json()["id"] == placed.json()["id"]


async def test_malformed_placement_request_gets_422_naming_the_field(
    stack: Stack, database_url: str
) -> None:
    async with scheduler(stack, database_url) as (client, _):
        answer = await client.post("/v1/placements", json={"job_id": "x", "gpus_per_node": 0})
        assert answer.status_code == 422
        assert answer.json()["detail"][0]["loc"] == ["body", "gpus_per_node"]
        missing = await client.post("/v1/placements", json={"gpus_per_node": 1})
        assert missing.json()["detail"][0]["loc"] == ["body", "job_id"]


def scorer_metric(stack: Stack, name: str) -> float:
    for line in httpx.get(f"{stack.scorer_url}/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_non_json_sample_is_dead_lettered_and_scoring_goes_on(stack: Stack) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap)
    await producer.start()
    try:
        # signed by its node: the decoder, not the signature check, must refuse it
        bad = b"this is not json"
        sent = await (
            await producer.send(
                NODE_SAMPLES, bad, key=b"bad-node", headers=signed(b"bad-node", bad)
            )
        )
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=stack.bootstrap, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(DEAD_LETTER, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        letter = None
        deadline = time.monotonic() + 60
        while letter is None and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    candidate = decode(DeadLetter, record.value)
                    if (candidate.partition, candidate.offset) == (sent.partition, sent.offset):
                        letter = candidate
    finally:
        await consumer.stop()
    assert letter is not None, "no dead letter for the bad record"
    assert letter.source_topic == NODE_SAMPLES
    assert letter.error.startswith("not JSON")
    await eventually(lambda: scorer_metric(stack, "fairlane_scorer_dead_lettered_total") >= 1)
    before = scorer_metric(stack, "fairlane_scorer_gpu_samples_scored_total")
    await eventually(
        lambda: scorer_metric(stack, "fairlane_scorer_gpu_samples_scored_total") > before
    )


def run_cli(module: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_missing_postgres_is_one_clear_line(kafka_bootstrap: str) -> None:
    done = run_cli(
        "fairlane_scheduler",
        ["--port", str(free_port())],
        {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
            "FAIRLANE_AUTH_DISABLED": "true",
        },
    )
    assert done.returncode == 2
    assert "fairlane-scheduler: error: Postgres is not reachable" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_kafka_is_one_clear_line() -> None:
    done = run_cli(
        "fairlane_agent", ["--metrics-port", "0"], {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    )
    assert done.returncode == 2
    assert "fairlane-agent: error: Kafka is not reachable at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr
