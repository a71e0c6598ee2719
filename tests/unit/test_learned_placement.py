"""Placement with a job class (issue 27 item 4): effective capacity = score x learned
speed under the class x model speed, a gang runs at its slowest GPU, a slow node is
passed over whole; the full scan and the ranked summaries choose alike. And which GPUs
of running placements are announced ``degraded``."""

from __future__ import annotations

import math

import pytest

from fairlane_events.records import SlowGpu
from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.degraded import DegradedPolicy, slow_gpus, suspects
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    PlacementPolicy,
    choose,
    effective_capacity,
)
from fairlane_scheduler.core.placements import Placement, PlacementRequest, assemble
from fairlane_scheduler.degraded_watch import DegradedWatch
from tests.factories import gpu_score, gpu_speed
from tests.unit.test_placement_service import service_on

NOW = 1_700_000_000_000
POLICY = PlacementPolicy(stale_after_s=600)
SPEED = 2.0  # the factory's model speed


def fleet_of(
    scores: dict[str, list[float]], speeds: dict[str, float] | None = None, model: float = SPEED
) -> FleetView:
    """Nodes of GPUs ``<node>-<i>`` with these scores and ``model`` speed, and learned
    speeds under ``bert``."""
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120))
    for name, node_scores in scores.items():
        for i, score in enumerate(node_scores):
            record = gpu_score(node=name, uuid=f"{name}-{i}", index=i, score=score, speed=model)
            fleet.apply(record.model_copy(update={"ts_ms": NOW}))
    for uuid, speed in (speeds or {}).items():
        fleet.apply_speed(gpu_speed(uuid=uuid, node=uuid.rsplit("-", 1)[0], speed=speed))
    return fleet


def both_ways(fleet: FleetView, shape: JobShape, policy: PlacementPolicy = POLICY) -> Choice:
    """The full scan's choice, checked against the ranked summaries'."""
    want = choose(fleet, shape, policy, fleet.held_rows(), NOW)
    assert isinstance(want, Choice), want
    for rankings in (NodeRankings(), NodeRankings(few_nodes=0, few_ranked=0)):
        assert rankings.choose(fleet, shape, policy, NOW) == want
    return want


def uuids(fleet: FleetView, choice: Choice) -> list[list[str]]:
    return [sorted(fleet.uuids[r] for r in node.rows) for node in choice.nodes]


def test_a_gpu_learned_slow_is_passed_over_within_its_node() -> None:
    fleet = fleet_of({"n0": [1.0, 1.0, 1.0, 1.0]}, {"n0-0": 0.5})
    assert uuids(fleet, both_ways(fleet, JobShape(3, job_class="bert"))) == [
        ["n0-1", "n0-2", "n0-3"]
    ]
    # Without a class (or under another one) the learned speed is not the job's.
    for shape in (JobShape(3), JobShape(3, job_class="resnet50")):
        assert uuids(fleet, both_ways(fleet, shape)) == [["n0-0", "n0-1", "n0-2"]]


def test_effective_capacity_is_score_x_learned_speed_x_model_speed() -> None:
    fleet = fleet_of({"n0": [0.8, 0.5]}, {"n0-0": 0.75})
    rows = fleet.rows_of(["n0-0", "n0-1"])
    capacity = effective_capacity(fleet, JobShape(1, job_class="bert"), rows)
    assert capacity.tolist() == pytest.approx([0.8 * 0.75 * SPEED, 0.5 * 1.0 * SPEED])


def test_a_gang_runs_at_its_slowest_gpu_and_avoids_the_slowest_nodes() -> None:
    fleet = fleet_of(
        {"n0": [1.0, 1.0], "n1": [1.0, 1.0], "n2": [1.0, 1.0]}, {"n1-0": 0.6, "n2-1": 0.8}
    )
    choice = both_ways(fleet, JobShape(2, nodes=2, job_class="bert"))
    assert sorted(n.node for n in choice.nodes) == ["n0", "n2"]
    assert choice.min_capacity == pytest.approx(0.8 * SPEED)


def test_a_whole_slow_node_is_avoided_as_a_unit() -> None:
    slow = {f"n0-{i}": 0.7 for i in range(4)} | {"n1-0": 0.7, "n1-1": 0.7}
    fleet = fleet_of({"n0": [1.0] * 4, "n1": [1.0] * 4, "n2": [0.9] * 4}, slow)
    # A one-node job of two takes n1's two typical GPUs, never the slow node n0...
    assert uuids(fleet, both_ways(fleet, JobShape(2, job_class="bert"))) == [["n1-2", "n1-3"]]
    # ...a gang of two nodes of two takes n1 and n2, and one of four nodes' worth cannot
    # do without a slow GPU: it takes the node whose slowness is partial and n2.
    gang = both_ways(fleet, JobShape(2, nodes=2, job_class="bert"))
    assert sorted(n.node for n in gang.nodes) == ["n1", "n2"]
    whole = both_ways(fleet, JobShape(4, nodes=1, job_class="bert"))
    assert [n.node for n in whole.nodes] == ["n2"]
    # Without a class, n0 (the best scores, packed first by name) is taken.
    assert [n.node for n in both_ways(fleet, JobShape(4)).nodes] == ["n0"]


def test_a_learned_factor_inside_the_capacity_step_still_ranks() -> None:
    """docs/evaluation.md found score x learned speed of 0.98 x 0.92 = 0.90 in the same
    0.1 capacity step as 0.98: the factor changed nothing. The speed step keeps it."""
    scores = {"a": [0.98, 0.98, 0.98], "b": [0.98] * 4}
    fleet = fleet_of(scores, {"a-0": 0.92}, model=1.0)
    fleet.hold("a-2")  # a is partly used: packing prefers it among equals
    shape = JobShape(2, job_class="bert")
    assert math.floor(0.98 * 0.92 / 0.1) == math.floor(0.98 / 0.1)  # one capacity step
    assert [n.node for n in both_ways(fleet, JobShape(2)).nodes] == ["a"]
    assert [n.node for n in both_ways(fleet, shape).nodes] == ["b"]
    # Exact speeds (speed_resolution 0) rank by the factor too.
    exact = PlacementPolicy(stale_after_s=600, speed_resolution=0.0)
    assert [n.node for n in both_ways(fleet, shape, exact).nodes] == ["b"]
    # Noise around 1.0 is no information: 0.985 rounds to the typical step, a is packed.
    noisy = fleet_of(scores, {"a-0": 0.985}, model=1.0)
    noisy.hold("a-2")
    assert [n.node for n in both_ways(noisy, shape).nodes] == ["a"]


def test_without_a_class_learned_speeds_change_nothing() -> None:
    scores = {f"n{k}": [0.7 + 0.03 * ((k * 5 + i) % 9) for i in range(4)] for k in range(6)}
    plain = fleet_of(scores)
    learned = fleet_of(scores, {f"n{k}-{i}": 0.5 + 0.1 * i for k in range(6) for i in range(4)})
    for shape in (JobShape(1), JobShape(2, nodes=2), JobShape(3, policy="binpack")):
        assert both_ways(learned, shape) == both_ways(plain, shape)


def test_a_speed_before_its_gpu_is_kept_and_an_older_one_is_ignored() -> None:
    fleet = fleet_of({})
    assert fleet.apply_speed(gpu_speed(uuid="n0-0", node="n0", speed=0.5, ts_ms=NOW))
    assert not fleet.apply_speed(gpu_speed(uuid="n0-0", node="n0", speed=0.9, ts_ms=NOW - 1))
    for i in range(2):
        fleet.apply(gpu_score(node="n0", uuid=f"n0-{i}", index=i, score=1.0, ts_ms=NOW))
    assert uuids(fleet, both_ways(fleet, JobShape(1, job_class="bert"))) == [["n0-1"]]


def test_a_new_speed_moves_a_ranked_node() -> None:
    fleet = fleet_of({"a": [1.0, 1.0], "b": [1.0, 1.0]})
    rankings, shape = NodeRankings(few_nodes=0), JobShape(2, job_class="bert")
    assert [n.node for n in placed(rankings.choose(fleet, shape, POLICY, NOW)).nodes] == ["a"]
    fleet.apply_speed(gpu_speed(uuid="a-1", node="a", speed=0.5))
    assert [n.node for n in placed(rankings.choose(fleet, shape, POLICY, NOW)).nodes] == ["b"]


def placed(choice: object) -> Choice:
    assert isinstance(choice, Choice), choice
    return choice


# -- degraded ------------------------------------------------------------------------

DEGRADED = DegradedPolicy(speed=0.85, threshold=0.65, stale_after_s=600)


def request(job: str, gpus: int, job_class: str | None = "bert") -> PlacementRequest:
    return PlacementRequest(
        job_id=job,
        namespace="team",
        gpus_per_node=gpus,
        min_gpu_memory_gib=None,
        models=None,
        fingerprint=job,
        job_class=job_class,
    )


@pytest.mark.parametrize(
    ("speed", "high", "score", "ts_ms", "sources"),
    [
        (0.70, 0.80, 0.9, NOW, ["learned"]),  # confidently slow
        (0.80, 0.90, 0.9, NOW, []),  # maybe slow: the interval reaches 0.85
        (0.70, 0.80, 0.5, NOW, ["learned", "score"]),  # both say so
        (1.00, 1.02, 0.5, NOW, ["score"]),  # below the threshold
        (1.00, 1.02, 0.0, NOW, ["score"]),  # health gate shut
        (1.00, 1.02, 0.5, NOW - 601_000, []),  # a stale score says nothing
    ],
)
def test_which_gpus_of_a_placement_are_slow(
    speed: float, high: float, score: float, ts_ms: int, sources: list[str]
) -> None:
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120))
    for i, gpu_score_now in enumerate((score, 0.9)):
        fleet.apply(gpu_score(node="n0", uuid=f"n0-{i}", index=i, score=gpu_score_now, ts_ms=ts_ms))
    fleet.apply_speed(gpu_speed(uuid="n0-0", node="n0", speed=speed, low=speed - 0.1, high=high))
    placement = placed_on(fleet_of({"n0": [0.9, 0.9]}))
    fleet.hold("n0-0")
    found = slow_gpus(fleet, placement, "bert", DEGRADED, NOW)
    assert [(g.uuid, g.source) for g in found] == [("n0-0", s) for s in sources]
    assert bool(suspects(fleet, DEGRADED, NOW)) == bool(sources)
    # Under another class, or none, nothing is learned: only the score can say so.
    for other_class in ("resnet50", None):
        other = slow_gpus(fleet, placement, other_class, DEGRADED, NOW)
        assert [g.source for g in other] == [s for s in sources if s == "score"]


def placed_on(fleet: FleetView) -> Placement:
    """A placement of both GPUs of ``fleet``'s one node, whatever their scores."""
    anyhow = PlacementPolicy(threshold=0, stale_after_s=1e9)
    choice = placed(choose(fleet, JobShape(2), anyhow, [], NOW))
    return assemble(request("j", 2), fleet, choice, port=29500, placement_id="p", now_ms=NOW)


async def test_a_slow_gpu_is_announced_once_per_placement_gpu_and_source() -> None:
    fleet = fleet_of({"n0": [0.9, 0.9], "n1": [0.9, 0.9]})
    store = MemoryStore()
    service = service_on(store, fleet)
    classed, _ = await service.place(request("classed", 2))
    plain, _ = await service.place(request("plain", 2, job_class=None))
    watch = DegradedWatch(store=store, fleet=fleet, policy=DEGRADED, clock_ms=lambda: NOW)
    assert await watch.check() == []
    for p in (classed, plain):
        gpu = p.nodes[0].gpus[0]
        fleet.apply_speed(gpu_speed(uuid=gpu.uuid, node=p.nodes[0].node, speed=0.6))
    (slow,) = await watch.check()
    assert slow == SlowGpu(
        uuid=classed.nodes[0].gpus[0].uuid, node=classed.nodes[0].node, speed=0.6, source="learned"
    )
    assert await watch.check() == []  # once
    restarted = DegradedWatch(store=store, fleet=fleet, policy=DEGRADED, clock_ms=lambda: NOW)
    assert await restarted.check() == []  # the store remembers
    (event,) = [e for e in store.events if e.event == "degraded"]
    assert (event.placement_id, event.slow_gpus) == (classed.id, [slow])
    # The same GPU later below the threshold too: one more event, by score.
    gpu = classed.nodes[0].gpus[0]
    fleet.apply(
        gpu_score(
            node=classed.nodes[0].node, uuid=gpu.uuid, index=gpu.index, score=0.3, ts_ms=NOW + 1
        )
    )
    assert [g.source for g in await watch.check()] == ["score"]
    # A placement without a class hears of its GPUs' scores too.
    gpu = plain.nodes[0].gpus[0]
    fleet.apply(
        gpu_score(
            node=plain.nodes[0].node, uuid=gpu.uuid, index=gpu.index, score=0.3, ts_ms=NOW + 1
        )
    )
    (slow_plain,) = await watch.check()
    assert (slow_plain.uuid, slow_plain.source) == (gpu.uuid, "score")


def test_the_speed_columns_grow_with_the_fleet() -> None:
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120), capacity=1)
    fleet.apply_speed(gpu_speed(uuid="n0-2", node="n0", speed=0.5, high=0.6))
    for i in range(3):
        fleet.apply(gpu_score(node="n0", uuid=f"n0-{i}", index=i, score=1.0, ts_ms=NOW))
    fleet.apply_speed(gpu_speed(uuid="n0-0", node="n0", speed=0.9, high=0.95))
    speeds = fleet.class_speeds("bert")
    assert speeds is not None
    assert speeds[:3].tolist() == [0.9, 1.0, 0.5]
    assert fleet.learned_slow(0.85).tolist() == [False, False, True]


def test_a_forgotten_speed_reads_as_nothing_learned() -> None:
    fleet = fleet_of({"a": [1.0, 1.0], "b": [1.0, 1.0]}, {"a-0": 0.5})
    rankings, shape = NodeRankings(few_nodes=0), JobShape(2, job_class="bert")
    assert [n.node for n in placed(rankings.choose(fleet, shape, POLICY, NOW)).nodes] == ["b"]
    fleet.forget_speed("a-0", "bert")  # a tombstone: the learner forgot the GPU
    fleet.forget_speed("a-0", "bert")  # twice, or of something never learned: nothing
    fleet.forget_speed("zz-9", "bert")
    assert "a-0" not in fleet.speed_records
    assert not fleet.learned_slow(0.85).any()
    assert [n.node for n in placed(rankings.choose(fleet, shape, POLICY, NOW)).nodes] == ["a"]
    assert both_ways(fleet, shape).nodes[0].node == "a"
