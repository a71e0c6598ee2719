"""The whole pipeline over SASL_SSL with per-service ACLs: agent (process, as
fairlane-agent) -> node samples -> scorer (process, as fairlane-scorer) -> scores ->
scheduler (in-process, as fairlane-scheduler) -> Postgres -> outbox -> placements topic.

Each service holds only its own SCRAM password (a file, as a mounted Secret) and its ACLs
allow exactly its topics, so the pipeline working end to end shows that the ACLs of
scripts/kafka.sh are enough, and docs/security.md's table true.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from fairlane_events.codec import decode
from fairlane_events.records import PlacementEvent
from fairlane_events.topics import PLACEMENTS
from fairlane_runtime.kafka import ensure_topics
from fairlane_scheduler.settings import SchedulerSettings
from tests.node_keys import SIGNING_ENV
from tests.processes import free_port, service, wait_for_http
from tests.scheduler_harness import running_scheduler
from tests.secure_kafka import SecureKafka, secure_kafka

pytestmark = pytest.mark.e2e

PREFIX = f"sasl-{os.getpid()}"
SIM_MODELS = ("A100-80GB", "H100", "V100")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    state = tmp_path_factory.mktemp("kafka-sasl-e2e")
    with secure_kafka(state) as broker:
        asyncio.run(ensure_topics(broker.operator))  # the operator creates the wire topics
        yield broker


@pytest.fixture(scope="module")
def producers(kafka: SecureKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    tmp = tmp_path_factory.mktemp("sasl-e2e")
    web_port = free_port()
    # the agent signs, the scorer verifies, as in every stack
    timing = {"FAIRLANE_INTERVAL_S": "1", "FAIRLANE_HEARTBEAT_S": "5", **SIGNING_ENV}
    scorer_env = {
        **kafka.env("fairlane-scorer"),
        **timing,
        "FAIRLANE_APP_ID": f"fairlane-scorer-{PREFIX}",  # inside the scorer's prefix ACLs
        "FAIRLANE_WEB_PORT": str(web_port),
        "FAIRLANE_DATA_DIR": str(tmp / "scorer-data"),
    }
    agent_args = ["--nodes", "2", "--node-prefix", PREFIX, "--seed", "5"]
    agent_args += ["--metrics-port", "0", "--backend", "sim"]
    with (
        service("fairlane_scorer", [], scorer_env, tmp / "scorer.log") as scorer,
        service(
            "fairlane_agent",
            agent_args,
            {**kafka.env("fairlane-agent"), **timing},
            tmp / "agent.log",
        ),
    ):
        wait_for_http(f"http://127.0.0.1:{web_port}/healthz", scorer, tmp / "scorer.log")
        yield


async def _placement_events(
    kafka: SecureKafka, placement_id: str, timeout_s: float = 30
) -> list[str]:
    """The placements topic as the scorer's principal reads it (it may; the ACLs say)."""
    consumer = AIOKafkaConsumer(
        PLACEMENTS,
        bootstrap_servers=kafka.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        **kafka.security("fairlane-scorer").aiokafka_kwargs(),
    )
    await consumer.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while not seen and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    event = decode(PlacementEvent, record.value)
                    if event.placement_id == placement_id:
                        seen.append(event.event)
    finally:
        await consumer.stop()
    return seen


async def test_sample_to_score_to_placement_over_sasl_ssl_with_acls(
    kafka: SecureKafka, producers: None, database_url: str, tmp_path: Path
) -> None:
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka.bootstrap,
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="fairlane-scheduler",
        kafka_sasl_password_file=kafka.secrets / "fairlane-scheduler.password",
        kafka_ssl_cafile=kafka.ca,
        database_url=database_url,
        stale_after_s=30,
        auth_disabled=True,
    )
    async with running_scheduler(settings) as (client, app):
        deadline = time.monotonic() + 120
        while sum(g.node.startswith(PREFIX) for g in app.state.runtime.fleet.gpus.values()) < 16:
            assert time.monotonic() < deadline, "the scores never reached the scheduler"
            await asyncio.sleep(0.5)
        while (await client.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, (await client.get("/readyz")).json()
            await asyncio.sleep(0.5)
        request = {"job_id": f"{PREFIX}-1", "gpus_per_node": 2, "models": list(SIM_MODELS)}
        answer = await client.post("/v1/placements", json=request)
        assert answer.status_code == 201, answer.text
        assert answer.json()["nodes"][0]["node"].startswith(PREFIX)
        assert await _placement_events(kafka, answer.json()["id"]) == ["created"]
