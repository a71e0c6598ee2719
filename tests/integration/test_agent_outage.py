"""The agent keeps every sample through a Kafka outage: a real broker, stopped and restarted.

The test owns a dedicated broker (scripts/kafka.sh on free ports, never a shared one),
runs the agent as a process, stops the broker for ``FAIRLANE_TEST_OUTAGE_S`` (60 s by
default) and restarts it, then consumes the topic: per node, every sample arrives, in
order, once.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from fairlane_events.codec import decode
from fairlane_events.records import NodeSample
from tests.node_samples import PARTITIONS, samples_consumer
from tests.processes import free_port, service, wait_for_http
from tests.servers import ROOT, local_server

pytestmark = pytest.mark.integration

# Free ports picked now unless given: a fixed one clashes with other brokers on the machine.
PORT = os.environ.get("FAIRLANE_TEST_OUTAGE_KAFKA_PORT") or str(free_port())
CONTROLLER_PORT = str(free_port())
KAFKA_ENV = {"KAFKA_PORT": PORT, "KAFKA_CONTROLLER_PORT": CONTROLLER_PORT}
OUTAGE_S = float(os.environ.get("FAIRLANE_TEST_OUTAGE_S", "60"))
INTERVAL_S = 1.0
NODES = 3


def kafka_script(*args: str) -> None:
    subprocess.run(
        [str(ROOT / "scripts" / "kafka.sh"), *args],
        env={**os.environ, **KAFKA_ENV},
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def own_kafka() -> Iterator[str]:
    with local_server("kafka.sh", KAFKA_ENV):
        yield f"127.0.0.1:{PORT}"


def metrics(url: str) -> dict[str, float]:
    """One scrape of /metrics: unlabelled samples by name."""
    lines = httpx.get(f"{url}/metrics", timeout=5).text.splitlines()
    return {n: float(v) for n, _, v in (ln.partition(" ") for ln in lines) if n[:1].isalpha()}


def metric(url: str, name: str) -> float:
    return metrics(url)[name]


def all_read_was_published(url: str) -> bool:
    now = metrics(url)
    return now["fairlane_agent_samples_published_total"] == now["fairlane_agent_samples_read_total"]


def wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not true after {timeout_s}s: {what}"
        time.sleep(0.5)


async def consume_all(bootstrap: str, prefix: str) -> dict[str, list[int]]:
    """Every sample's ts_ms per node of this test's fleet, in partition (= node) order."""
    async with samples_consumer(bootstrap) as consumer:
        end = await consumer.end_offsets(PARTITIONS)
        seen: dict[str, list[int]] = {}
        while [tp for tp in PARTITIONS if await consumer.position(tp) < end[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    sample = decode(NodeSample, record.value)
                    assert record.timestamp == sample.ts_ms  # Kafka timestamp = sample time
                    if sample.node.startswith(prefix):
                        seen.setdefault(sample.node, []).append(sample.ts_ms)
        return seen


async def test_samples_taken_while_kafka_is_down_arrive_in_order_exactly_once(
    own_kafka: str, tmp_path: Path, unique: str
) -> None:
    prefix, port, log = f"outage-{unique}", free_port(), tmp_path / "agent.log"
    args = ["--backend", "sim", "--nodes", str(NODES), "--gpus-per-node", "2"]
    args += ["--node-prefix", prefix, "--interval-s", str(INTERVAL_S)]
    args += ["--metrics-port", str(port), "--kafka-request-timeout-s", "3"]
    url = f"http://127.0.0.1:{port}"
    with service("fairlane_agent", args, {"KAFKA_BOOTSTRAP_SERVERS": own_kafka}, log) as agent:
        wait_for_http(f"{url}/healthz", agent, log)
        wait(lambda: metric(url, "fairlane_agent_samples_published_total") >= 2 * NODES, 30, "up")
        kafka_script("down")
        outage_started = time.monotonic()
        wait(lambda: httpx.get(f"{url}/healthz").json()["kafka"] == "unreachable", 30, "noticed")
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_started)))
        during = httpx.get(f"{url}/healthz")
        assert during.status_code == 200  # buffering is healthy: no restart wanted
        assert during.json()["backlog"] >= NODES * (OUTAGE_S - 15) / INTERVAL_S
        kafka_script("up")
        # Published = read at some instant after the outage: nothing read was lost.
        wait(lambda: all_read_was_published(url), 90, "backlog drained")
        assert "fairlane_agent_samples_dropped_total{" not in httpx.get(f"{url}/metrics").text
        read = metric(url, "fairlane_agent_samples_read_total")
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0, log.read_text()[-3000:]
    seen = await consume_all(own_kafka, prefix)
    assert sorted(seen) == [f"{prefix}-{n:04d}" for n in range(NODES)]
    for node, stamps in seen.items():
        assert stamps == sorted(set(stamps)), f"{node}: out of order or duplicated"
        # No hole where the outage was (a slow round on a busy machine is not a hole).
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert max(gaps) < 10 * INTERVAL_S * 1000, f"{node}: {max(gaps)} ms without a sample"
    delivered = sum(len(s) for s in seen.values())
    assert delivered >= read  # every sample read arrived, plus later rounds flushed on SIGTERM
    assert delivered >= OUTAGE_S * NODES / INTERVAL_S
