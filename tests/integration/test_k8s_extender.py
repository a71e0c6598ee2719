"""A real kube-scheduler (v1.37, deploy/'s KubeSchedulerConfiguration) asks the real
Fairlane stack — a simulated fleet, the scorer and the scheduler as processes on real
Kafka and Postgres — where GPU pods may go, and Fairlane binds them (bind verb).

The fleet: node 0 has 8 GPUs of which 3 throttle for the whole run (5 qualify); node 1's
4 GPUs throttle for the first 40 s, then recover; a third Node has no Fairlane scores.
The tests run in order on one stack (module scope), each leaving no pod behind.
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.kube import Kube, wait_for
from tests.kube_stack import FairlaneStack, stack_fixture

SCENARIO = """
name = "k8s: a hot corner and a node that recovers"

[fleet]
nodes = 2
gpus_per_node = 8
models = ["H100"]
degraded_fraction = 0.0

[[events]]
kind = "thermal"
nodes = [0]
gpus = [5, 6, 7]
start_s = 0
ramp_s = 1
clock_factor = 0.3

[[events]]
kind = "thermal"
nodes = [1]
start_s = 0
duration_s = 40
ramp_s = 1
clock_factor = 0.3
"""


fairlane = stack_fixture("k8s", SCENARIO)


@pytest.fixture(scope="module")
def stack(fairlane: FairlaneStack) -> FairlaneStack:
    s = fairlane
    for n in range(3):
        s.kube.gpu_node(s.node(n), 8)

    def ready() -> bool:  # node 0: 5 qualifying GPUs, node 1: none, before any pod
        held_out = s.gpu_states(1)
        return s.gpu_states(0).get("free") == 5 and bool(held_out) and "free" not in held_out

    wait_for("node 0's 5 qualifying GPUs, none on node 1", ready, 120)
    return s


def bound(kube: Kube, names: list[str]) -> dict[str, str]:
    return {n: node for n in names if (node := kube.node_of(n)) is not None}


def test_gpu_pods_go_only_where_fairlane_passes_and_never_over_commit(stack: FairlaneStack) -> None:
    """The reproduction: node 0 counts 8 GPUs in Kubernetes, 5 in Fairlane; four 2-GPU
    pods: two are bound there, none anywhere else, and the others wait, saying why."""
    kube, names = stack.kube, [f"burst-{i}" for i in range(4)]
    for name in names:
        kube.pod(name, gpus=2)

    def two_bound() -> dict[str, str] | None:
        found = bound(kube, names)
        return found if len(found) == 2 else None

    placed = wait_for("two bindings", two_bound)
    assert set(placed.values()) == {stack.node(0)}
    waiting = [n for n in names if n not in placed]
    for name in waiting:
        message = wait_for("a FailedScheduling condition", partial(kube.unschedulable, name))
        assert "held by Kubernetes pods" in message, message  # node 0: its GPUs are taken
        assert "no GPU scores from Fairlane" in message, message  # node 2
        assert "score" in message or "cooling" in message, message  # node 1, throttled
    assert len(bound(kube, names)) == 2  # still, after every pod was judged again
    # A pod that ends gives its GPUs back: one waiting pod takes them.
    kube.delete_pod(next(iter(placed)))
    wait_for("the freed GPUs taken", lambda: len(bound(kube, waiting)) == 1, 30)
    for name in names:
        kube.delete_pod(name)


def test_a_throttled_node_is_avoided_until_it_recovers(stack: FairlaneStack) -> None:
    """The pod that waited is bound once node 1's GPUs are readmitted, with nothing else
    happening in the cluster: Fairlane's eligible-GPU annotation on the Node is the event
    that sends it back to kube-scheduler's queue (else it would sit for 5 minutes)."""
    kube = stack.kube
    kube.pod("big-0", gpus=4)
    why = lambda: (kube.unschedulable("big-0"), stack.gpu_states(0))  # noqa: E731
    assert wait_for("big-0 bound", lambda: kube.node_of("big-0"), why=why) == stack.node(0)
    kube.pod("big-1", gpus=4)  # node 0 has 1 qualifying GPU left, node 1 is held out
    message = wait_for("big-1 refused", lambda: kube.unschedulable("big-1"))
    assert "score" in message or "cooling" in message, message
    assert kube.node_of("big-1") is None
    wait_for("node 1 readmitted", lambda: stack.gpu_states(1).get("free") == 8, 150)

    def annotations() -> dict[str, str]:
        node = kube.ok("GET", f"/api/v1/nodes/{stack.node(1)}")
        return dict(node["metadata"].get("annotations") or {})

    bound_to = wait_for(
        "big-1 bound after the recovery", lambda: kube.node_of("big-1"), 60, why=annotations
    )
    assert bound_to == stack.node(1)
    # The count is what a next pod could take: 8 qualifying, 4 of them big-1's.
    wait_for("node 1's count", lambda: annotations().get("fairlane.dev/eligible-gpus") == "4", 30)
    kube.delete_pod("big-0")
    kube.delete_pod("big-1")


def test_with_fairlane_down_gpu_pods_wait_and_schedule_when_it_returns(
    stack: FairlaneStack,
) -> None:
    kube = stack.kube
    stack.stop_scheduler()
    kube.pod("web", gpus=0)  # asks for no GPU: never sent to the extender
    kube.pod("train", gpus=2)
    assert wait_for("web bound without Fairlane", lambda: kube.node_of("web"))
    message = wait_for("train refused", lambda: kube.unschedulable("train"))
    assert message.startswith("SchedulerError"), message
    assert "extender" in message.lower() or "connection refused" in message, message
    events = kube.events_of("train")
    assert any(e["reason"] == "FailedScheduling" for e in events), events
    assert kube.node_of("train") is None
    stack.start_scheduler()
    assert wait_for("train bound after Fairlane returned", lambda: kube.node_of("train"), 60) in (
        stack.node(0),
        stack.node(1),
    )
    kube.delete_pod("web")
    kube.delete_pod("train")
