"""Scheduler replicas prefer their own share of the nodes among those the packing ranks
equal (core/replica_share.py, core/placement.py ``packing_keys``): on the same view they
choose different nodes while their shares allow, ``fastest`` never leaves its best
capacity step for the share nor ``spread`` its least used nodes, ``binpack`` fills its
own share first, and one replica ranks exactly as before."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_scheduler.app import placement_policy
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NoPlacement,
    Packing,
    PlacementPolicy,
    choose,
    packing_keys,
)
from fairlane_scheduler.core.replica_share import ALONE, ReplicaShare
from fairlane_scheduler.settings import SchedulerSettings
from tests.factories import gpu_score

NOW = 1_700_000_000_000
PACKINGS: tuple[Packing, ...] = ("fastest", "binpack", "spread")
#: The replica of 3 each of these node names belongs to (CRC-32 of the name, mod 3).
OWNER = {"n0": 0, "n1": 1, "n2": 2, "n3": 0, "n4": 1, "n5": 0, "n6": 1, "n7": 0, "n8": 1}


def _fleet(scores: dict[str, list[float]]) -> FleetView:
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120))
    for name, node_scores in scores.items():
        for i, score in enumerate(node_scores):
            fleet.apply(gpu_score(node=name, uuid=f"{name}-{i}", index=i, score=score, ts_ms=NOW))
    return fleet


def _policy(share: ReplicaShare, resolution: float = 0.1) -> PlacementPolicy:
    return PlacementPolicy(stale_after_s=600, capacity_resolution=resolution, share=share)


def _both_ways(fleet: FleetView, shape: JobShape, policy: PlacementPolicy) -> Choice:
    """The full scan's choice, checked against the ranked summaries'."""
    want = choose(fleet, shape, policy, fleet.held_rows(), NOW)
    assert isinstance(want, Choice), want
    for rankings in (NodeRankings(), NodeRankings(few_nodes=0)):
        assert rankings.choose(fleet, shape, policy, NOW) == want
    return want


def test_a_node_is_in_exactly_one_share_by_a_stable_hash_of_its_name() -> None:
    names = list(OWNER)
    mine = [1 - ReplicaShare(3, i).others(names) for i in range(3)]
    assert np.array_equal(sum(mine), np.ones(len(names)))  # one owner each
    # Fixed values: the same in every process (Python's hash() of a str is salted).
    assert [int(np.argmax([m[n] for m in mine])) for n in range(len(names))] == list(OWNER.values())
    assert not ALONE.others(names).any()


def test_the_share_column_follows_new_nodes() -> None:
    fleet, share = _fleet({"n0": [0.9], "n1": [0.9]}), ReplicaShare(3, 1)
    assert fleet.others_share(share).tolist() == [1.0, 0.0]
    fleet.apply(gpu_score(node="n2", uuid="n2-0", score=0.9, ts_ms=NOW))
    assert fleet.others_share(share).tolist() == [1.0, 0.0, 1.0]
    assert fleet.others_share(ReplicaShare(3, 2)).tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(("replicas", "index"), [(0, 0), (3, 3), (3, -1)])
def test_an_index_outside_the_replicas_is_refused(replicas: int, index: int) -> None:
    with pytest.raises(ValueError, match="replica"):
        ReplicaShare(replicas, index)


@pytest.mark.parametrize("packing", PACKINGS)
@pytest.mark.parametrize("resolution", [0.1, 0.0])
def test_replicas_on_the_same_view_choose_their_own_nodes(
    packing: Packing, resolution: float
) -> None:
    fleet = _fleet({name: [0.9] * 4 for name in OWNER})  # nine equally good nodes
    shape = JobShape(2, policy=packing)
    nodes = []
    for index in range(3):
        choice = _both_ways(fleet, shape, _policy(ReplicaShare(3, index), resolution))
        (node,) = choice.nodes
        assert OWNER[node.node] == index
        nodes.append(node.node)
    assert len(set(nodes)) == 3
    # One replica takes what it always took: the first name.
    assert _both_ways(fleet, shape, _policy(ALONE, resolution)).nodes[0].node == "n0"


def test_one_replica_ranks_by_the_packing_keys_alone() -> None:
    def keys(packing: Packing, resolution: float, others: float | None = None) -> list[Any]:
        return packing_keys(
            packing,
            (resolution, 0.05),
            min_cap=1.8,
            total_cap=3.6,
            used=2,
            size=8,
            name_rank=5,
            others=others,
        )

    assert keys("fastest", 0.1) == [-18.0, 6.0, 5]
    assert keys("binpack", 0.1) == [6.0, -18.0, 5]
    assert keys("spread", 0.0) == [0.25, -1.8, -3.6, 5]
    assert keys("fastest", 0.1, others=1.0) == [-18.0, 1.0, 6.0, 5]
    assert keys("binpack", 0.1, others=1.0) == [1.0, 6.0, -18.0, 5]
    assert keys("spread", 0.0, others=1.0) == [0.25, 1.0, -1.8, -3.6, 5]


def test_fastest_keeps_its_best_capacity_step_over_the_share() -> None:
    # Only n1 (replica 1's) is in the fastest step: replica 0 still takes it.
    fleet = _fleet({"n0": [0.7, 0.7], "n1": [0.99, 0.99], "n3": [0.7, 0.7]})
    choice = _both_ways(fleet, JobShape(1), _policy(ReplicaShare(3, 0)))
    assert choice.nodes[0].node == "n1"


def test_binpack_fills_its_own_share_before_a_fuller_node_of_another() -> None:
    fleet = _fleet({"n0": [0.9] * 8, "n1": [0.9] * 8})
    for i in range(6):
        fleet.hold(f"n1-{i}")  # n1, replica 1's, has 2 GPUs free, n0 has 8
    shape = JobShape(1, policy="binpack")
    assert _both_ways(fleet, shape, _policy(ReplicaShare(3, 0))).nodes[0].node == "n0"
    assert _both_ways(fleet, shape, _policy(ALONE)).nodes[0].node == "n1"
    # With no node of its share (n2 is not there), it packs as one replica does.
    assert _both_ways(fleet, shape, _policy(ReplicaShare(3, 2))).nodes[0].node == "n1"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([0.7, 0.8, 0.9, 0.95, 1.0]), min_size=4, max_size=4),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=len(OWNER),
    ),
    st.sampled_from(PACKINGS),
    st.integers(1, 2),
    st.integers(0, 2),
)
def test_the_share_only_breaks_the_packings_ties(nodes, packing, per_node, index) -> None:  # type: ignore[no-untyped-def]
    fleet = _fleet({f"n{i}": scores for i, (scores, _) in enumerate(nodes)})
    for i, (_, held) in enumerate(nodes):
        for gpu in range(held):
            fleet.hold(f"n{i}-{gpu}")
    shape = JobShape(per_node, policy=packing)
    alone = choose(fleet, shape, _policy(ALONE), fleet.held_rows(), NOW)
    if isinstance(alone, NoPlacement):
        return
    choice = _both_ways(fleet, shape, _policy(ReplicaShare(3, index)))
    free = {f"n{i}": 4 - held for i, (_, held) in enumerate(nodes)}

    def step(c: Choice) -> int:
        return math.floor(c.min_capacity / 0.1 + 1e-9)

    (mine,), (first,) = choice.nodes, alone.nodes
    if packing == "fastest":  # the same capacity step, the share first within it
        assert step(choice) == step(alone)
    elif packing == "spread":  # the same used share, the share first within it
        assert free[mine.node] == free[first.node]
    fits = [f"n{i}" for i, (_, held) in enumerate(nodes) if 4 - held >= per_node]
    own = [name for name in fits if OWNER[name] == index]
    if packing == "binpack" and own:
        assert OWNER[mine.node] == index
        assert free[mine.node] == min(free[name] for name in own)


def _settings(monkeypatch: pytest.MonkeyPatch, host: str, **values: object) -> SchedulerSettings:
    monkeypatch.setattr("fairlane_scheduler.settings.socket.gethostname", lambda: host)
    return SchedulerSettings(auth_disabled=True, **values)  # type: ignore[arg-type]


def test_the_replica_index_is_the_statefulset_ordinal_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _settings(monkeypatch, "fairlane-scheduler-2", replicas=3).replica_share() == (
        ReplicaShare(3, 2)
    )
    assert _settings(monkeypatch, "scheduler", replicas=3).replica_share() == ReplicaShare(3, 0)
    assert _settings(monkeypatch, "fairlane-scheduler-2").replica_share() == ALONE
    given = _settings(monkeypatch, "fairlane-scheduler-2", replicas=3, replica_index=1)
    assert given.replica_share() == ReplicaShare(3, 1)
    assert placement_policy(given).share == ReplicaShare(3, 1)  # what the decisions use


def test_the_replica_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRLANE_REPLICAS", "3")
    monkeypatch.setenv("FAIRLANE_REPLICA_INDEX", "2")
    assert _settings(monkeypatch, "host").replica_share() == ReplicaShare(3, 2)


@pytest.mark.parametrize(
    ("host", "values", "says"),
    [
        ("fairlane-scheduler-3", {"replicas": 3}, "host fairlane-scheduler-3"),
        ("host", {"replicas": 2, "replica_index": 2}, "replica index 2 is not one of 0..1"),
    ],
)
def test_a_replica_index_out_of_range_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, host: str, values: dict[str, int], says: str
) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        _settings(monkeypatch, host, **values)
    assert "FAIRLANE_REPLICA_INDEX" in str(refused.value)
