from typing import TYPE_CHECKING, Any, cast

import pytest

from fairlane_scheduler.api.extender import ExtenderArgs, extender_filter, extender_prioritize
from fairlane_scheduler.core.extender import NodeVerdict, judge_nodes, priorities
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.pod import PodError, pod_shape
from tests.unit.test_placement import NOW, fleet_of, node

if TYPE_CHECKING:
    from fairlane_scheduler.api.deps import Runtime

POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)


def pod(
    limits: list[Any], annotations: dict[str, str] | None = None, init: tuple[Any, ...] = ()
) -> dict[str, Any]:
    def container(gpus: Any) -> dict[str, Any]:
        return {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}

    return {
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {
            "containers": [container(g) for g in limits],
            "initContainers": [container(g) for g in init],
        },
    }


def test_pod_shape_reads_limits_and_annotations() -> None:
    shape = pod_shape(
        pod(
            ["2", 1],
            {
                "fairlane.dev/gpu-models": "H100, NVIDIA A100-SXM4-80GB",
                "fairlane.dev/min-gpu-memory-gib": "40",
            },
        )
    )
    assert shape == JobShape(3, models=frozenset({"H100", "A100-80GB"}), min_gpu_memory_gib=40.0)
    assert pod_shape(pod(["1"], init=("4",))) == JobShape(4)


def test_a_pod_without_gpus_has_no_shape() -> None:
    assert pod_shape(pod([])) is None
    assert pod_shape(pod(["0"], {"fairlane.dev/gpu-models": "Voodoo"})) is None
    assert pod_shape({"spec": {"containers": [{"name": "web", "resources": {}}]}}) is None


async def test_a_pod_without_gpus_passes_every_node_it_was_given() -> None:
    # No runtime: a pod Fairlane has no opinion about never reaches the fleet view.
    runtime = cast("Runtime", None)
    names = ExtenderArgs(Pod=pod([]), NodeNames=["a", "b"])
    answer = await extender_filter(names, runtime)
    assert (answer.NodeNames, answer.FailedNodes, answer.Error) == (["a", "b"], {}, "")
    assert answer.FailedAndUnresolvableNodes == {}
    node_list = {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}]}
    whole = await extender_filter(ExtenderArgs(Pod=pod([]), Nodes=node_list), runtime)
    assert (whole.Nodes, whole.NodeNames, whole.Error) == (node_list, None, "")
    ranked = await extender_prioritize(names, runtime)
    assert [(p.Host, p.Score) for p in ranked] == [("a", 0), ("b", 0)]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (pod(["two"]), "not a whole number"),
        (pod(["1"], {"fairlane.dev/gpu-models": "H100,Voodoo"}), "unknown GPU models"),
        (pod(["1"], {"fairlane.dev/min-gpu-memory-gib": "lots"}), "not a number"),
    ],
)
def test_unreadable_pods_say_why(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(PodError, match=message):
        pod_shape(bad)


def test_verdicts_split_failed_from_unresolvable() -> None:
    fleet = fleet_of(
        node("good", [0.9, 0.9]),
        node("hot", [0.5, 0.9]),
        node("t4", [0.9, 0.9], model="Tesla T4", speed=0.2),
        node("broken", [0.0, 0.9]),
        node("busy", [0.9, 0.9]),
    )
    verdicts = judge_nodes(
        fleet,
        shape=JobShape(2, models=frozenset({"H100"})),
        policy=POLICY,
        allocated={"busy-0"},
        now_ms=NOW,
        node_names=["good", "hot", "t4", "broken", "busy", "unknown"],
    )
    assert verdicts["good"].fits
    assert not verdicts["hot"].fits
    assert not verdicts["hot"].unresolvable
    assert "1 score below threshold" in verdicts["hot"].reason
    assert not verdicts["busy"].fits
    assert not verdicts["busy"].unresolvable
    assert verdicts["t4"].unresolvable
    assert "allowed model" in verdicts["t4"].reason
    assert verdicts["broken"].unresolvable
    assert "healthy" in verdicts["broken"].reason
    assert verdicts["unknown"].unresolvable


def test_priorities_scale_capacity_to_0_10() -> None:
    verdicts = {
        "fast": NodeVerdict(True, min_capacity=2.0),
        "slow": NodeVerdict(True, min_capacity=0.5),
        "out": NodeVerdict(False),
    }
    assert priorities(verdicts) == {"fast": 10, "slow": 2, "out": 0}
    assert priorities({"out": NodeVerdict(False)}) == {"out": 0}
