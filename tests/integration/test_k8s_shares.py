"""Fractional GPUs through a real kube-scheduler (v1.37, deploy/'s KubeSchedulerConfiguration
with ``fairlane.dev/gpu-share`` managed and ignored by the scheduler): pods asking for a
share of one GPU are packed onto one GPU by Fairlane's extender, each recorded as a
placement in Postgres at bind and bound with its share's annotations; the GPU is never
over-committed, a whole-GPU pod never lands on it, a share that ends is taken again, and
one whose pod went while Fairlane was down is released when it starts.

The fleet: one node with 2 healthy H100s (node 0); a second Node has no Fairlane scores.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube import Kube, wait_for
from tests.kube_stack import FairlaneStack, stack_fixture

SCENARIO = """
name = "k8s: GPUs shared by fractional pods"

[fleet]
nodes = 1
gpus_per_node = 2
models = ["H100"]
degraded_fraction = 0.0
"""

fairlane = stack_fixture("k8s-share", SCENARIO)
H100_MIB = 80 * 1024


PODS = [*(f"share-{i}" for i in range(4)), "whole-0", "whole-1"]


@pytest.fixture(scope="module")
def stack(fairlane: FairlaneStack) -> Iterator[FairlaneStack]:
    for n in range(2):
        fairlane.kube.gpu_node(fairlane.node(n), 2)
    wait_for("node 0's 2 free GPUs", lambda: fairlane.gpu_states(0).get("free") == 2, 120)
    yield fairlane
    for name in PODS:  # none left for later modules, should a test fail halfway
        fairlane.kube.delete_pod(name)


def pod(stack: FairlaneStack, name: str, *, share: int = 0, gpus: int = 0) -> None:
    """A pod that may go to this module's two nodes only: earlier modules' fleets may
    still have fresh scores (the scores topic is the session's), and their Nodes stay."""
    term = {
        "key": "kubernetes.io/hostname",
        "operator": "In",
        "values": [stack.node(0), stack.node(1)],
    }
    required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    stack.kube.pod(name, gpus=gpus, share=share, affinity=affinity)


def pod_annotations(kube: Kube, name: str) -> dict[str, str]:
    return dict(kube.get_pod(name)["metadata"].get("annotations") or {})


def state(stack: FairlaneStack, placement_id: str) -> str:
    return str(stack.api(f"/v1/placements/{placement_id}")["state"])


def slot(stack: FairlaneStack, pod: dict[str, str]) -> Any:
    placement = stack.api(f"/v1/placements/{pod['fairlane.dev/placement-id']}")
    assert placement["state"] == "placed", placement
    (node,) = placement["nodes"]
    (gpu,) = node["gpus"]
    return gpu


def test_shares_fill_one_gpu_never_past_it_and_whole_pods_stay_off_it(
    stack: FairlaneStack,
) -> None:
    kube, shares = stack.kube, PODS[:3]
    for name in shares:
        pod(stack, name, share=300)
    wait_for("three shares bound", lambda: all(kube.node_of(n) for n in shares))
    assert {kube.node_of(n) for n in shares} == {stack.node(0)}
    notes = {name: pod_annotations(kube, name) for name in shares}
    (shared,) = {note["fairlane.dev/gpu-uuid"] for note in notes.values()}  # packed: one GPU
    for note in notes.values():
        assert note["fairlane.dev/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30", note
        assert note["fairlane.dev/FAIRLANE_GPU_MEMORY_MIB"] == str(H100_MIB * 3 // 10), note
        gpu = slot(stack, note)
        assert (gpu["uuid"], gpu["share"], gpu["memory_mib"]) == (shared, 0.3, H100_MIB * 3 // 10)

    pod(stack, "whole-0", gpus=1)  # the other GPU, which no share holds
    assert wait_for("whole-0 bound", lambda: kube.node_of("whole-0")) == stack.node(0)
    pod(stack, "share-3", share=300)  # 100/1000 left on the shared GPU, the other is whole-0's
    message = wait_for("share-3 refused", lambda: kube.unschedulable("share-3"))
    detail = stack.api(f"/v1/nodes/{stack.node(0)}")  # the GPUs, should this fail
    assert "no GPU with 300/1000 free (most free on one GPU: 100/1000" in message, (message, detail)
    assert "no GPU scores from Fairlane" in message, message  # node 1
    pod(stack, "whole-1", gpus=1)  # the shared GPU is no whole GPU
    message = wait_for("whole-1 refused", lambda: kube.unschedulable("whole-1"))
    assert "0 of 1 GPUs free to take (1 placed by Fairlane, 1 held by Kubernetes pods)" in message

    # A share that ends is released, and its room taken by the pod that waited.
    first = notes["share-0"]["fairlane.dev/placement-id"]
    kube.delete_pod("share-0")
    wait_for("share-0's share released", lambda: state(stack, first) == "released", 30)
    assert wait_for("share-3 bound", lambda: kube.node_of("share-3"), 60) == stack.node(0)
    assert pod_annotations(kube, "share-3")["fairlane.dev/gpu-uuid"] == shared
    assert kube.node_of("whole-1") is None

    # A pod that goes while no replica watches: the listing at start releases its share.
    gone = notes["share-1"]["fairlane.dev/placement-id"]
    stack.stop_scheduler()
    kube.delete_pod("share-1")
    stack.start_scheduler()
    wait_for("share-1's share released after the restart", lambda: state(stack, gone) == "released")
    rest = [notes["share-2"], pod_annotations(kube, "share-3")]
    for name in ("share-2", "share-3", "whole-0", "whole-1"):
        kube.delete_pod(name)
    ids = [note["fairlane.dev/placement-id"] for note in rest]
    every = lambda: all(state(stack, i) == "released" for i in ids)  # noqa: E731
    wait_for("every share released with its pod", every, 30)
