from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from fastapi import FastAPI

from fairlane_scheduler.api.extender import ExtenderState, router
from fairlane_scheduler.core.extender import GangAsk, Verdicts, judge_nodes
from fairlane_scheduler.core.extender_reasons import _distinct_rows
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.pod import PodError, pod_gang, pod_shape
from fairlane_scheduler.core.pod_ledger import PodGpus, PodLedger
from fairlane_scheduler.settings import SchedulerSettings
from tests.factories import gpu_score
from tests.unit.test_placement import NOW, fleet_of, node

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


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """The extender's routes with no fleet view at all."""
    app = FastAPI()
    app.include_router(router)
    app.state.runtime, app.state.extender = None, ExtenderState()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as answering:
        yield answering


async def test_a_pod_without_gpus_passes_every_node_it_was_given(
    client: httpx.AsyncClient,
) -> None:
    # No fleet view at all: a pod Fairlane has no opinion about never reaches it.
    names = {"Pod": pod([]), "NodeNames": ["a", "b"]}
    answer = (await client.post("/v1/extender/filter", json=names)).json()
    assert (answer["NodeNames"], answer["FailedNodes"], answer["Error"]) == (["a", "b"], {}, "")
    assert answer["FailedAndUnresolvableNodes"] == {}
    node_list = {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}]}
    whole = {"Pod": pod([]), "Nodes": node_list}
    answer = (await client.post("/v1/extender/filter", json=whole)).json()
    assert (answer["Nodes"], answer["NodeNames"], answer["Error"]) == (node_list, None, "")
    ranked = (await client.post("/v1/extender/prioritize", json=names)).json()
    assert ranked == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]
    bad = await client.post("/v1/extender/filter", json={"Pod": [], "NodeNames": []})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "Pod"]
    unbound = {"PodName": "p", "PodNamespace": "n", "PodUID": "u", "Node": "a"}
    answer = (await client.post("/v1/extender/bind", json=unbound)).json()
    assert "no Kubernetes API" in answer["Error"]


async def test_node_names_that_are_not_strings_are_refused_naming_the_field(
    client: httpx.AsyncClient,
) -> None:
    for names in (["a", 1], "a", [None]):
        call = {"Pod": pod(["1"]), "NodeNames": names}
        answer = await client.post("/v1/extender/filter", json=call)
        assert answer.status_code == 422
        assert answer.json()["detail"][0]["loc"] == ["body", "NodeNames"]
    empty = await client.post("/v1/extender/filter", json={"Pod": pod([]), "NodeNames": []})
    assert empty.json()["NodeNames"] == []


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


def judge(
    fleet: FleetView,
    shape: JobShape,
    names: list[str],
    *,
    allocated: frozenset[str] = frozenset(),
    held: npt.NDArray[np.int64] | None = None,
    gang: GangAsk | None = None,
    now_ms: int = NOW,
) -> Verdicts:
    for gpu in allocated:
        fleet.hold(gpu)
    return judge_nodes(
        fleet,
        NodeSummaries(),
        shape=shape,
        policy=POLICY,
        held=held,
        now_ms=now_ms,
        node_names=names,
        gang=gang,
    )


def test_verdicts_split_failed_from_unresolvable() -> None:
    fleet = fleet_of(
        node("good", [0.9, 0.9]),
        node("hot", [0.5, 0.9]),
        node("t4", [0.9, 0.9], model="Tesla T4", speed=0.2),
        node("broken", [0.0, 0.9]),
        node("busy", [0.9, 0.9]),
    )
    names = ["good", "hot", "t4", "broken", "busy", "unknown"]
    verdicts = judge(
        fleet, JobShape(2, models=frozenset({"H100"})), names, allocated=frozenset({"busy-0"})
    )
    assert verdicts.passed() == ["good"]
    failed, unresolvable = verdicts.failed(), verdicts.unresolvable_nodes()
    assert set(failed) == {"hot", "busy"}
    assert "1 score 0.50 < 0.65" in failed["hot"]
    assert "1 placed by Fairlane" in failed["busy"]
    assert set(unresolvable) == {"t4", "broken", "unknown"}
    assert "allowed model" in unresolvable["t4"]
    assert "healthy" in unresolvable["broken"]
    assert "no GPU scores" in unresolvable["unknown"]


def test_a_cooling_gpu_says_until_when() -> None:
    fleet = fleet_of(node("n", [0.9, 0.9]))
    fleet.apply(gpu_score(node="n", uuid="n-0", index=0, score=0.3, ts_ms=NOW + 1000))
    fleet.apply(gpu_score(node="n", uuid="n-0", index=0, score=0.9, ts_ms=NOW + 2000))
    reason = judge(fleet, JobShape(2), ["n"], now_ms=NOW + 3000).failed()["n"]
    assert reason == "1 of 2 GPUs free to take (1 cooling until 22:15:22Z)"  # NOW+2 s+120 s


def test_priorities_scale_the_offered_capacity_to_0_10() -> None:
    fleet = fleet_of(node("fast", [0.9, 0.9]), node("slow", [0.9, 0.3]), node("half", [0.45, 0.9]))
    ranked = judge(fleet, JobShape(1), ["fast", "slow", "half", "nowhere"]).priorities()
    assert ranked == [10, 10, 10, 0]
    # Held GPUs are assumed to be the best: what is left on "half" is its 0.45... no,
    # below the threshold; so one pod on it leaves nothing, and "slow" offers its 0.9.
    held = np.array([0, 0, 1], dtype=np.int64)
    verdicts = judge(fleet, JobShape(1), ["fast", "slow", "half"], held=held)
    assert verdicts.passed() == ["fast", "slow"]
    assert "1 held by Kubernetes pods" in verdicts.failed()["half"]


def test_prioritize_ranks_the_survivors_from_the_filters_answer() -> None:
    fleet = fleet_of(node("fast", [0.9, 0.9]), node("slow", [0.5, 0.9]), node("mid", [0.7, 0.9]))
    verdicts = judge(fleet, JobShape(1), ["fast", "slow", "mid"])
    assert verdicts.priorities(["mid", "fast", "gone"]) == [10, 10, 0]
    two = judge(fleet, JobShape(2), ["fast", "slow", "mid"])
    assert two.priorities(["mid", "fast"]) == [8, 10]  # worst GPU 0.7 vs 0.9
    # A filter that judged no node, then a prioritize of the same pod with nodes (the
    # sequence a fuzzer sends): every name is unknown and ranks 0 (it raised IndexError: 500).
    assert judge(fleet, JobShape(1), []).priorities(["mid", "gone"]) == [0, 0]


def test_a_node_with_5_qualifying_gpus_takes_two_2_gpu_pods_not_four() -> None:
    """The reproduction of issue 10: 8 GPUs, 3 below the threshold."""
    fleet = fleet_of(node("n", [0.9] * 5 + [0.4] * 3))
    ledger, summaries = PodLedger(), NodeSummaries()
    bound = 0
    for i in range(4):
        uid = f"pod-{i}"
        held = ledger.held(fleet.node_id, len(fleet.nodes), NOW, exclude=uid)
        verdicts = judge_nodes(
            fleet,
            summaries,
            shape=JobShape(2),
            policy=POLICY,
            held=held,
            now_ms=NOW,
            node_names=["n"],
        )
        if verdicts.passed():
            # kube-scheduler's next filter may come before this pod's binding
            ledger.approve(uid, PodGpus(2), verdicts.node_ids[verdicts.fits], NOW)
            bound += 1
    assert bound == 2
    ledger.bind("pod-0", "n", PodGpus(2))
    ledger.bind("pod-1", "n", PodGpus(2))
    assert ledger.bound_on("n") == 4
    ledger.release("pod-0")  # it ended: its GPUs are offered again
    held = ledger.held(fleet.node_id, len(fleet.nodes), NOW, exclude="pod-9")
    assert held.tolist() == [2]


def test_an_unbound_approval_lapses_and_a_refilter_replaces_it() -> None:
    fleet = fleet_of(node("n", [0.9, 0.9]))
    ledger = PodLedger(in_flight_s=10)
    ledger.approve("a", PodGpus(2), np.array([0]), NOW)
    assert ledger.held(fleet.node_id, 1, NOW, exclude="b").tolist() == [2]
    assert ledger.held(fleet.node_id, 1, NOW, exclude="a").tolist() == [0]  # its own
    assert ledger.held(fleet.node_id, 1, NOW + 10_000, exclude="b").tolist() == [0]


def test_a_gang_is_passed_only_where_all_of_it_fits_on_the_fastest() -> None:
    fleet = fleet_of(
        node("fast-1", [0.95, 0.95]),
        node("fast-2", [0.9, 0.9]),
        node("slow", [0.7, 0.7]),
    )
    names = ["slow", "fast-1", "fast-2"]
    two = judge(fleet, JobShape(2), names, gang=GangAsk("ns/g", 2))
    assert two.passed() == ["fast-1", "fast-2"]
    assert "faster nodes" in two.failed()["slow"]
    four = judge(fleet, JobShape(2), names, gang=GangAsk("ns/g", 4))
    assert four.passed() == []
    assert "4 pod(s) still to place, these nodes fit 3" in four.failed()["fast-1"]
    ledger = PodLedger()
    ledger.approve("m1", PodGpus(2, "ns/g"), np.array([0]), NOW)
    ledger.bind("m2", "fast-2", PodGpus(2, "ns/g"))
    assert ledger.gang_members("ns/g", exclude="m3") == 2
    assert ledger.gang_members("ns/g", exclude="m1") == 1


def test_gang_annotations_are_read_and_checked() -> None:
    gang = {"fairlane.dev/gang": "train", "fairlane.dev/gang-size": "4"}
    member = {**pod(["2"], gang), "metadata": {"namespace": "team", "annotations": gang}}
    assert pod_gang(member) == ("team/train", 4)
    assert pod_gang(pod(["2"])) is None
    with pytest.raises(PodError, match="gang-size"):
        pod_gang(pod(["2"], {"fairlane.dev/gang": "x", "fairlane.dev/gang-size": "lots"}))


def test_kubernetes_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="kube_device_taints needs kube_api_url"):
        SchedulerSettings(auth_disabled=True, kube_device_taints=True)
    with pytest.raises(ValueError, match="needs kube_token_file"):
        SchedulerSettings(auth_disabled=True, kube_api_url="https://127.0.0.1:6443")
    assert SchedulerSettings(auth_disabled=True, kube_api_url="in-cluster").kube_api_url


@pytest.mark.parametrize("wide", [1, 2000])  # one int64 code; rows too wide for one
def test_equal_reason_keys_are_grouped_exactly(wide: int) -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 3, size=(400, 13)) * wide
    keys[:, 11] = rng.choice([-(2**53), 1_700_000_000], size=400)  # a time, or none
    first, which = _distinct_rows(keys)
    assert (keys[first][which] == keys).all()  # each row is its group's row
    assert len(first) == len({tuple(row) for row in keys.tolist()})
