"""A pod's share of one GPU: how it is read from the pod, which nodes and GPUs the
extender offers it, and the placement and annotations its bind makes (core/pod.py,
core/extender_shares.py, core/pod_shares.py, kube/share_placements.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fairlane_events.records import GpuSlot, NodeAssignment
from fairlane_scheduler.core.extender_shares import ShareVerdicts, judge_share_nodes
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.core.pod import PodError, PodRef, PodShare, pod_shape, pod_share
from fairlane_scheduler.core.pod_shares import ShareFlights, add_uses
from fairlane_scheduler.core.shares import GpuUse, share_env
from fairlane_scheduler.kube.share_placements import pod_share_request, share_annotations
from tests.unit.test_placement import NOW, fleet_of, node

POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)
H100_MIB = 80 * 1024


def share_pod(
    *shares: str, gpus: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    def container(share: str) -> dict[str, Any]:
        limits = {"fairlane.dev/gpu-share": share}
        if gpus is not None:
            limits["nvidia.com/gpu"] = gpus
        return {"name": "c", "resources": {"limits": limits}}

    return {
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {"containers": [container(s) for s in shares]},
    }


def test_a_share_is_read_in_thousandths_with_its_memory_and_models() -> None:
    annotations = {"fairlane.dev/gpu-memory-mib": "20480", "fairlane.dev/gpu-models": "H100"}
    share = pod_share(share_pod("250", "100", annotations=annotations))
    assert share == PodShare(350, 20480, JobShape(1, models=frozenset({"H100"})))
    assert pod_share(share_pod("1000")) == PodShare(1000, None, JobShape(1))
    assert pod_shape(share_pod("250")) is None  # not a whole-GPU pod


def test_a_pod_without_a_share_has_none() -> None:
    assert pod_share({"spec": {"containers": [{"name": "web"}]}}) is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (share_pod("1001"), "fairlane.dev/gpu-share: 1001 is more than one GPU"),
        (share_pod("0"), "fairlane.dev/gpu-share: 0 is no share; ask for 1..1000 thousandths"),
        (share_pod("600", "600"), "fairlane.dev/gpu-share: 1200 is more than one GPU"),
        (share_pod("-5"), "fairlane.dev/gpu-share limit -5 is negative"),
        (share_pod("0.5"), "fairlane.dev/gpu-share limit '0.5' is not a whole number"),
        (share_pod("250", gpus="1"), "fairlane.dev/gpu-share: a pod asks for nvidia.com/gpu or"),
        (
            {
                "metadata": {"annotations": {"fairlane.dev/gpu-memory-mib": "1024"}},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            },
            "fairlane.dev/gpu-share: fairlane.dev/gpu-memory-mib needs a share too",
        ),
        (
            share_pod("250", annotations={"fairlane.dev/gpu-memory-mib": "0"}),
            "fairlane.dev/gpu-memory-mib: 0 must be at least 1",
        ),
        (
            share_pod(
                "250",
                annotations={
                    "fairlane.dev/gpu-memory-mib": "40000",
                    "fairlane.dev/gpu-models": "L4",
                },
            ),
            "fairlane.dev/gpu-memory-mib: 40000 MiB is more than the largest allowed GPU's "
            "memory (24576 MiB)",
        ),
    ],
)
def test_a_share_that_cannot_be_placed_names_its_field(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(PodError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        pod_share(bad)


def test_whole_gpus_and_a_share_together_are_refused_on_the_whole_path_too() -> None:
    with pytest.raises(PodError, match="not both"):
        pod_shape(share_pod("250", gpus="1"))


def judge(
    fleet: FleetView,
    pod: PodShare,
    names: list[str],
    use: dict[str, GpuUse] | None = None,
    whole_pods: list[int] | None = None,
) -> ShareVerdicts:
    return judge_share_nodes(
        fleet,
        NodeSummaries(),
        pod=pod,
        policy=POLICY,
        use=use or {},
        whole_pods=None if whole_pods is None else np.array(whole_pods, dtype=np.int64),
        now_ms=NOW,
        node_names=names,
    )


def quarter(milli: int = 250, memory_mib: int | None = None) -> PodShare:
    return PodShare(milli, memory_mib, JobShape(1))


def test_a_share_goes_to_the_gpu_already_shared_not_a_fresh_one() -> None:
    fleet = fleet_of(node("a", [0.9, 0.9]), node("b", [0.9, 0.9]))
    use = {"b-1": GpuUse(500, 40 * 1024, 2)}
    judged = judge(fleet, quarter(), ["a", "b"], use)
    assert judged.gpus["b"] == ("b-1", H100_MIB // 4)
    assert judged.verdicts.priorities() == [5, 10]  # b's GPU is the rule's first choice


def test_the_shares_of_a_gpu_never_pass_one_gpu_or_its_memory() -> None:
    fleet = fleet_of(node("a", [0.9]))
    assert judge(fleet, quarter(250), ["a"], {"a-0": GpuUse(750, 0, 3)}).gpus == {
        "a": ("a-0", H100_MIB // 4)
    }
    full = judge(fleet, quarter(300), ["a"], {"a-0": GpuUse(750, 0, 3)})
    assert full.gpus == {}
    assert full.verdicts.failed() == {
        "a": "no GPU with 300/1000 free (most free on one GPU: 250/1000 and 81920 MiB)"
    }
    memory = judge(fleet, quarter(100, 40000), ["a"], {"a-0": GpuUse(100, 60000, 1)})
    assert memory.verdicts.failed()["a"].startswith("no GPU with 100/1000 and 40000 MiB free")


def test_a_gpu_a_whole_placement_or_pod_holds_takes_no_share() -> None:
    fleet = fleet_of(node("a", [0.9, 0.8]))
    fleet.hold("a-0")  # a whole placement
    assert judge(fleet, quarter(), ["a"]).gpus == {"a": ("a-1", H100_MIB // 4)}
    # A whole Kubernetes pod holds one of the two: the best (a-0) is assumed taken.
    fleet.hold("a-0", held=False)
    assert judge(fleet, quarter(), ["a"], whole_pods=[1]).gpus == {"a": ("a-1", H100_MIB // 4)}
    both = judge(fleet, quarter(), ["a"], whole_pods=[2])
    assert both.verdicts.failed()["a"] == (
        "no GPU with 250/1000 free (most free on one GPU: 0/1000 and 0 MiB, 2 held whole)"
    )
    # A shared GPU is not what a whole pod takes: the share goes there.
    shared = judge(fleet, quarter(), ["a"], {"a-1": GpuUse(500, 0, 1)}, whole_pods=[1])
    assert shared.gpus == {"a": ("a-1", H100_MIB // 4)}


def test_unhealthy_unknown_and_too_small_nodes_say_why() -> None:
    fleet = fleet_of(node("hot", [0.4, 0.9]), node("l4", [0.9], model="NVIDIA L4"))
    fleet.hold("hot-1")
    pod = PodShare(250, 30000, JobShape(1, models=frozenset({"H100"})))
    judged = judge(fleet, pod, ["hot", "l4", "gone"])
    assert judged.verdicts.failed() == {
        "hot": "no GPU with 250/1000 and 30000 MiB free (most free on one GPU: 0/1000 and "
        "0 MiB, 1 held whole, 1 not qualifying now)"
    }
    assert judged.verdicts.unresolvable_nodes() == {
        "l4": "no GPU of an allowed model and size",
        "gone": "no GPU scores from Fairlane for this node",
    }
    too_big = judge(fleet, PodShare(250, 90000, JobShape(1)), ["hot"])
    assert too_big.verdicts.unresolvable_nodes() == {
        "hot": "no GPU with 90000 MiB of memory (the largest here: 81920 MiB)"
    }


def test_pods_in_flight_fill_a_gpu_without_over_committing_it() -> None:
    """kube-scheduler's next filter may come before the last pod's binding: the room its
    flight holds is not offered again, until it lands or lapses."""
    fleet = fleet_of(node("a", [0.9]))
    flights, passed = ShareFlights(in_flight_s=10), []
    for i in range(5):
        uid = f"pod-{i}"
        judged = judge(fleet, quarter(300), ["a"], flights.use(NOW, exclude=uid))
        if judged.verdicts.passed():
            flights.approve(uid, quarter(300), dict(judged.gpus.values()), NOW)
            passed.append(uid)
    assert passed == ["pod-0", "pod-1", "pod-2"]  # 900 of 1000
    assert flights.use(NOW, exclude="pod-0") == {"a-0": GpuUse(600, 2 * 24576, 2)}
    assert flights.flying("pod-1") == quarter(300)
    flights.land("pod-1")  # bound: its placement counts in the ledger from now
    assert flights.use(NOW, exclude="x") == {"a-0": GpuUse(600, 2 * 24576, 2)}
    assert flights.use(NOW + 10_000, exclude="x") == {}  # the others lapsed


def test_placements_and_flights_add_up_and_whole_pods_avoid_a_flights_gpu() -> None:
    placed = {"a-0": GpuUse(500, 100, 2)}
    assert add_uses(placed, {"a-0": GpuUse(250, 20, 1), "a-1": GpuUse(100, 5, 1)}) == {
        "a-0": GpuUse(750, 120, 3),
        "a-1": GpuUse(100, 5, 1),
    }
    flying = {"a-0": GpuUse(250, 20, 1), "a-1": GpuUse(100, 5, 1), "b-0": GpuUse(1, 1, 1)}
    node_of = {"a-0": 0, "a-1": 0, "b-0": 1}.get
    # a-0 is shared by a placement already (held in the fleet): not counted twice.
    per_node = ShareFlights().unshared_per_node(flying, {"a-0"}, node_of, 2)
    assert per_node.tolist() == [1, 1]


def test_a_pods_share_is_requested_on_its_node_and_annotated_from_its_placement() -> None:
    pod, share = PodRef("team", "train-0", "uid-1"), PodShare(300, None, JobShape(1))
    request = pod_share_request(pod, share, "node-a")
    assert (request.job_id, request.namespace, request.on_node) == ("pod/uid-1", "team", "node-a")
    assert (request.gpu_share, request.gpu_memory_mib, request.gpus_per_node) == (0.3, None, 1)
    assert pod_share_request(pod, share, "node-a").fingerprint == request.fingerprint
    assert pod_share_request(pod, share, "node-b").fingerprint != request.fingerprint
    slot = GpuSlot(uuid="GPU-1", index=0, share=0.3, memory_mib=24576)
    env = share_env(300, 24576, H100_MIB)
    assignment = NodeAssignment(
        node="node-a",
        node_rank=0,
        gpus=[slot],
        cuda_visible_devices="0",
        master_addr="node-a",
        master_port=29500,
        world_size=1,
        env=env,
    )
    placement = Placement("p-1", "pod/uid-1", "team", "placed", NOW, (assignment,), "f")
    annotations = share_annotations(placement)
    assert annotations["fairlane.dev/gpu-uuid"] == "GPU-1"
    assert annotations["fairlane.dev/placement-id"] == "p-1"
    assert annotations["fairlane.dev/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert len(annotations) == 2 + len(env)
