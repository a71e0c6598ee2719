"""The agent's bounded backlog (pure) and its sending loop against an in-memory sender."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from fairlane_agent.core.backlog import Backlog, BacklogLimits, Drops
from fairlane_agent.delivery import Delivery
from fairlane_agent.metrics import AgentMetrics
from fairlane_events.records import NodeSample
from tests.factories import node_sample

T0 = 1_700_000_000_000


def round_at(ts_ms: int, nodes: str = "abc") -> list[NodeSample]:
    return [node_sample(node=f"node-{n}", ts_ms=ts_ms) for n in nodes]


def keys(samples: list[NodeSample]) -> list[tuple[str, int]]:
    return [(s.node, s.ts_ms) for s in samples]


def test_overflow_drops_the_oldest_samples_and_counts_them() -> None:
    backlog = Backlog(BacklogLimits(max_samples=4))
    assert backlog.add(round_at(T0), T0) == Drops()
    assert backlog.add(round_at(T0 + 1000), T0 + 1000) == Drops(overflow=2)
    assert keys(backlog.take_batch(10)) == [
        ("node-c", T0),
        ("node-a", T0 + 1000),
        ("node-b", T0 + 1000),
    ]


def test_samples_older_than_the_age_limit_are_dropped_as_expired() -> None:
    backlog = Backlog(BacklogLimits(max_age_s=60))
    backlog.add(round_at(T0), T0)
    assert backlog.add(round_at(T0 + 61_000), T0 + 61_000) == Drops(expired=3)
    assert len(backlog) == 3


def test_a_batch_holds_at_most_one_sample_per_node_oldest_first() -> None:
    backlog = Backlog(BacklogLimits())
    backlog.add(round_at(T0, "ab"), T0)
    backlog.add(round_at(T0 + 1, "ab"), T0 + 1)
    assert keys(backlog.take_batch(10)) == [("node-a", T0), ("node-b", T0)]
    assert keys(backlog.take_batch(1)) == [("node-a", T0 + 1)]


def test_failed_samples_go_back_to_the_front_in_order() -> None:
    backlog = Backlog(BacklogLimits())
    backlog.add(round_at(T0), T0)
    backlog.add(round_at(T0 + 1), T0 + 1)
    batch = backlog.take_batch(10)
    backlog.put_back([batch[0], batch[2]])
    assert keys(backlog.take_batch(10)) == [("node-a", T0), ("node-c", T0)]
    assert keys(backlog.take_batch(10)) == [
        ("node-a", T0 + 1),
        ("node-b", T0 + 1),
        ("node-c", T0 + 1),
    ]


@pytest.mark.parametrize("limits", [(0, 1.0), (1, 0.0)])
def test_limits_must_be_positive(limits: tuple[int, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        BacklogLimits(*limits)


class FlakyBroker:
    """An in-memory sender: while ``down`` every send fails; ``log`` is what arrived."""

    def __init__(self) -> None:
        self.down = False
        self.refuse = False  # as Kafka answers a write its ACLs deny
        self.fail_nodes: set[str] = set()
        self.log: list[tuple[str, int]] = []

    async def send_batch(self, samples: list[NodeSample]) -> list[BaseException | None]:
        await asyncio.sleep(0)
        outcomes: list[BaseException | None] = []
        for s in samples:
            if self.refuse:
                outcomes.append(TopicAuthorizationFailedError("fairlane.node-samples.v1"))
            elif self.down or s.node in self.fail_nodes:
                outcomes.append(ConnectionError("broker away"))
            else:
                self.log.append((s.node, s.ts_ms))
                outcomes.append(None)
        return outcomes


def metric(metrics: AgentMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


async def wait_until(check: Callable[[], bool], timeout_s: float = 5) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout_s)


async def test_backlog_from_an_outage_arrives_in_order_exactly_once() -> None:
    broker, metrics, stop = FlakyBroker(), AgentMetrics.create(), asyncio.Event()
    delivery = Delivery(Backlog(BacklogLimits()), broker, metrics)
    sending = asyncio.create_task(delivery.run(stop))
    broker.down = True
    for i in range(5):
        delivery.add(round_at(T0 + i * 1000), T0 + i * 1000)
    await wait_until(lambda: not delivery.connected)
    assert metric(metrics, "fairlane_agent_samples_buffered") == 15
    broker.down = False
    await wait_until(lambda: len(broker.log) == 15)
    stop.set()
    await sending
    for node in ("node-a", "node-b", "node-c"):
        assert [ts for n, ts in broker.log if n == node] == [T0 + i * 1000 for i in range(5)]
    assert len(set(broker.log)) == 15
    assert delivery.connected
    assert metric(metrics, "fairlane_agent_samples_published_total") == 15


async def test_one_failing_node_does_not_reorder_or_duplicate_the_others() -> None:
    broker, metrics, stop = FlakyBroker(), AgentMetrics.create(), asyncio.Event()
    delivery = Delivery(Backlog(BacklogLimits()), broker, metrics)
    broker.fail_nodes = {"node-b"}
    for i in range(3):
        delivery.add(round_at(T0 + i), T0 + i)
    sending = asyncio.create_task(delivery.run(stop))
    await wait_until(lambda: not delivery.connected)
    await asyncio.sleep(0.05)  # a few retries of node-b while the others go through
    broker.fail_nodes = set()
    await wait_until(lambda: len(broker.log) == 9)
    stop.set()
    await sending
    for node in ("node-a", "node-b", "node-c"):
        assert [ts for n, ts in broker.log if n == node] == [T0, T0 + 1, T0 + 2]
    assert len(set(broker.log)) == 9


async def test_shutdown_flushes_within_the_deadline_and_counts_the_rest() -> None:
    broker, metrics = FlakyBroker(), AgentMetrics.create()
    delivery = Delivery(Backlog(BacklogLimits()), broker, metrics)
    delivery.add(round_at(T0), T0)
    await delivery.flush(deadline_s=1)
    assert len(broker.log) == 3
    broker.down = True
    delivery.add(round_at(T0 + 1), T0 + 1)
    await delivery.flush(deadline_s=0.3)
    assert metric(metrics, "fairlane_agent_samples_dropped_total", reason="shutdown") == 3


def test_overflow_drops_are_counted_in_metrics() -> None:
    metrics = AgentMetrics.create()
    delivery = Delivery(Backlog(BacklogLimits(max_samples=3)), FlakyBroker(), metrics)
    delivery.add(round_at(T0), T0)
    delivery.add(round_at(T0 + 1), T0 + 1)
    assert metric(metrics, "fairlane_agent_samples_dropped_total", reason="overflow") == 3
    assert delivery.pending == 3


async def test_a_write_the_acls_deny_is_counted_and_logged_once_not_a_storm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker, metrics, stop = FlakyBroker(), AgentMetrics.create(), asyncio.Event()
    broker.refuse = True
    delivery = Delivery(Backlog(BacklogLimits()), broker, metrics)
    delivery.add(round_at(T0), T0)
    with caplog.at_level(logging.WARNING, logger="fairlane"):
        sending = asyncio.create_task(delivery.run(stop))
        await wait_until(lambda: metric(metrics, "fairlane_agent_kafka_refused_total") >= 6)
        await asyncio.sleep(0.3)  # backing off: a handful of tries, not thousands
        stop.set()
        await sending
    assert metric(metrics, "fairlane_agent_kafka_refused_total") < 30
    refusals = [r for r in caplog.records if "refused this principal" in r.getMessage()]
    assert len(refusals) == 1
    assert "TopicAuthorizationFailedError" in refusals[0].getMessage()
    assert metric(metrics, "fairlane_agent_samples_buffered") == 3  # kept, not lost silently
