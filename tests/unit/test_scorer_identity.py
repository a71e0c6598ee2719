"""A node speaks only for its own GPUs: the scorer's future, replay, rate, binding and
GPU-cap checks."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairlane_events.records import NodeSample
from fairlane_scorer.core.bindings import (
    Bindings,
    IdentityConfig,
    Quarantined,
    expired_slots,
    future_after_ms,
    live_uuids,
)
from fairlane_scorer.core.node_identity import check_batch, prunable_slots
from fairlane_scorer.core.node_state import NodeState, keep_slots
from fairlane_scorer.core.step import score_batch
from fairlane_scorer.identity import parse_pins, pinned_bindings
from fairlane_scorer.settings import ScorerSettings
from fairlane_scoring.config import ScoreConfig
from tests.factories import gpu_sample
from tests.node_keys import TEST_KEY_RING

T0 = 1_700_000_000_000
S = 1000  # ms
CONFIG = IdentityConfig(
    replay_tolerance_s=90,
    sample_min_spacing_s=1,
    gpu_expire_after_s=1800,
    max_future_skew_s=120,
    max_gpus_per_node=2,  # the cases' nodes hold at most two GPUs
)


def sample(node: str, ts_ms: int, *uuids: str) -> NodeSample:
    gpus = [gpu_sample(uuid=u, index=i) for i, u in enumerate(uuids)]
    return NodeSample(schema_="node-sample/1", node=node, ts_ms=ts_ms, source="sim", gpus=gpus)


def rows_after(history: Sequence[NodeSample]) -> dict[str, NodeState]:
    return score_batch(history, {}, {}, ScoreConfig()).rows


def bindings_of(rows: Mapping[str, NodeState], pins: Mapping[str, str] | None = None) -> Bindings:
    bindings = Bindings()
    for row in rows.values():
        bindings.index(row)
    bindings.pins = pins or {}
    return bindings


CASES = [
    # name, history, batch, now, refused (position, reason), scored (node, ts, uuids)
    ("a fresh sample is scored", [sample("a", T0, "g1")], [sample("a", T0 + 30 * S, "g1")],
     T0, [], [("a", T0 + 30 * S, ("g1",))]),
    ("a replay older than the tolerance is dead-lettered",
     [sample("a", T0 + 200 * S, "g1")], [sample("a", T0, "g1")], T0, [(0, "replay")], []),
    ("a redelivery within the tolerance is left to the duplicate rule",
     [sample("a", T0 + 60 * S, "g1")], [sample("a", T0 + 30 * S, "g1")],
     T0, [], [("a", T0 + 30 * S, ("g1",))]),
    ("a record less than the spacing after the newest is dead-lettered",
     [sample("a", T0, "g1")], [sample("a", T0 + 500, "g1")], T0, [(0, "rate")], []),
    ("a record exactly the spacing after the newest is scored",
     [sample("a", T0, "g1")], [sample("a", T0 + S, "g1")], T0, [], [("a", T0 + S, ("g1",))]),
    ("a flood 1 ms apart keeps its first record only", [],
     [sample("a", T0 + i, "g1") for i in range(4)], T0,
     [(1, "rate"), (2, "rate"), (3, "rate")], [("a", T0, ("g1",))]),
    ("a uuid bound to another node is quarantined, the record's other GPUs scored",
     [sample("a", T0, "g1")], [sample("b", T0 + 30 * S, "g1", "g2")], T0,
     [(0, "quarantine")], [("b", T0 + 30 * S, ("g2",))]),
    ("a forged record of another node's GPUs only is not scored",
     [sample("a", T0, "g1", "g2")], [sample("evil", T0 + 30 * S, "g1", "g2")], T0,
     [(0, "quarantine")], []),
    ("the first node to report a new uuid in a batch binds it", [],
     [sample("a", T0, "g1"), sample("b", T0, "g1")], T0,
     [(1, "quarantine")], [("a", T0, ("g1",))]),
    ("an expired binding frees the uuid for another node", [sample("a", T0, "g1")],
     [sample("b", T0 + 1801 * S, "g1")], T0 + 1801 * S, [], [("b", T0 + 1801 * S, ("g1",))]),
    ("a binding not yet expired holds", [sample("a", T0, "g1")],
     [sample("b", T0 + 1799 * S, "g1")], T0 + 1799 * S, [(0, "quarantine")], []),
    ("a redelivered GPU sample too close to its GPU's last is removed",
     [sample("a", T0, "g1", "g2"), sample("a", T0 + 30 * S, "g1")],
     [sample("a", T0 + 500, "g1", "g2")], T0, [(0, "rate")], [("a", T0 + 500, ("g1",))]),
    # future: more than max_future_skew_s (120 s) ahead of now
    ("a sample more than the skew ahead of the clock is dead-lettered", [],
     [sample("a", T0 + 120 * S + 1, "g1")], T0, [(0, "future")], []),
    ("a sample exactly the skew ahead of the clock is scored", [],
     [sample("a", T0 + 120 * S, "g1")], T0, [], [("a", T0 + 120 * S, ("g1",))]),
    ("a sample from the future binds no uuid", [],
     [sample("a", T0 + 3600 * S, "g1"), sample("b", T0, "g1")], T0,
     [(0, "future")], [("b", T0, ("g1",))]),
    ("a sample from the future does not make its node's next ones replays",
     [sample("a", T0 - 30 * S, "g1")],
     [sample("a", T0 + 3600 * S, "g1"), sample("a", T0, "g1")], T0,
     [(0, "future")], [("a", T0, ("g1",))]),
    ("the future bound is checked against the scorer's clock, not the node's newest",
     [sample("a", T0, "g1")], [sample("a", T0 + 200 * S, "g1")], T0 + 100 * S,
     [], [("a", T0 + 200 * S, ("g1",))]),
    # gpu_cap: at most max_gpus_per_node (2) live GPUs a node
    ("a new GPU past the cap is removed, the node's live GPUs scored",
     [sample("a", T0, "g1", "g2")], [sample("a", T0 + 30 * S, "g1", "g2", "g3")], T0,
     [(0, "gpu_cap")], [("a", T0 + 30 * S, ("g1", "g2"))]),
    ("a record of new GPUs only, past the cap, is not scored",
     [sample("a", T0, "g1", "g2")], [sample("a", T0 + 30 * S, "g3")], T0,
     [(0, "gpu_cap")], []),
    ("a new node's record is capped too", [],
     [sample("a", T0, "g1", "g2", "g3")], T0, [(0, "gpu_cap")], [("a", T0, ("g1", "g2"))]),
    ("the GPUs a batch added count towards the cap", [],
     [sample("a", T0, "g1", "g2"), sample("a", T0 + 30 * S, "g3", "g1")], T0,
     [(1, "gpu_cap")], [("a", T0, ("g1", "g2")), ("a", T0 + 30 * S, ("g1",))]),
    ("expired GPUs do not count towards the cap",
     [sample("a", T0, "g1", "g2")], [sample("a", T0 + 1801 * S, "g3", "g4")], T0 + 1801 * S,
     [], [("a", T0 + 1801 * S, ("g3", "g4"))]),
    ("one GPU expired leaves room for one",
     [sample("a", T0, "g1", "g2"), sample("a", T0 + 60 * S, "g2")],
     [sample("a", T0 + 1830 * S, "g2", "g3", "g4")], T0 + 1830 * S,
     [(0, "gpu_cap")], [("a", T0 + 1830 * S, ("g2", "g3"))]),
    ("a quarantined GPU takes no room",
     [sample("x", T0, "g9")], [sample("a", T0, "g9", "g1", "g2")], T0,
     [(0, "quarantine")], [("a", T0, ("g1", "g2"))]),
    ("quarantine outranks gpu_cap in the count",
     [sample("x", T0, "g9"), sample("a", T0, "g1", "g2")],
     [sample("a", T0 + 30 * S, "g3", "g9")], T0, [(0, "quarantine")], []),
    ("a GPU capped is not bound: another node may take it", [sample("a", T0, "g1", "g2")],
     [sample("a", T0 + 30 * S, "g3"), sample("b", T0 + 30 * S, "g3")], T0,
     [(0, "gpu_cap")], [("b", T0 + 30 * S, ("g3",))]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("history", "batch", "now_ms", "refused", "scored"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_identity_checks(
    history: list[NodeSample],
    batch: list[NodeSample],
    now_ms: int,
    refused: list[tuple[int, str]],
    scored: list[tuple[str, int, tuple[str, ...]]],
) -> None:
    rows = rows_after(history)
    checked = check_batch(batch, rows, bindings_of(rows), now_ms, CONFIG)
    assert [(r.position, r.reason) for r in checked.refused] == refused
    assert [(s.node, s.ts_ms, tuple(g.uuid for g in s.gpus)) for s in checked.samples] == scored


def test_a_refusal_names_the_uuid_and_the_node_it_is_bound_to() -> None:
    rows = rows_after([sample("real-1", T0, "GPU-1")])
    checked = check_batch(
        [sample("evil-node-1", T0 + 30 * S, "GPU-1")], rows, bindings_of(rows), T0, CONFIG
    )
    (refusal,) = checked.refused
    assert "GPU-1" in refusal.error
    assert "'real-1'" in refusal.error
    assert checked.quarantined == [("GPU-1", "evil-node-1")]


def test_refusals_say_how_far_ahead_and_how_many_gpus() -> None:
    checked = check_batch(
        [sample("a", T0 + 600 * S, "g1"), sample("b", T0, "g1", "g2", "g3")],
        {},
        Bindings(),
        T0,
        CONFIG,
    )
    future, capped = checked.refused
    assert future.error.startswith("future: ")
    assert "600 s ahead" in future.error
    assert "at most 120 s" in future.error
    assert (
        capped.error == "gpu_cap: GPU g3 would be one more than node 'b''s 2 live GPUs; at most 2"
    )


def test_future_after_and_live_uuids() -> None:
    assert future_after_ms(T0, CONFIG) == T0 + 120 * S
    state = rows_after([sample("a", T0, "g1", "g2"), sample("a", T0 + 60 * S, "g2")])["a"]
    assert live_uuids(state, T0 + 1800 * S, CONFIG) == {"g1", "g2"}
    assert live_uuids(state, T0 + 1801 * S, CONFIG) == {"g2"}
    assert live_uuids(state, T0 + 1861 * S, CONFIG) == set()


def test_a_node_adding_fresh_uuids_every_second_keeps_a_row_of_at_most_the_cap() -> None:
    """Check, score and prune as the samples agent does: the row never holds more than
    max_gpus_per_node slots, and an old GPU that expires makes room for a new one."""
    config = IdentityConfig(gpu_expire_after_s=10, max_gpus_per_node=3)
    rows: dict[str, NodeState] = {}
    for i in range(40):
        now = T0 + i * S
        batch = [sample("a", now, "real", f"fresh-{i}-0", f"fresh-{i}-1")]
        checked = check_batch(batch, rows, bindings_of(rows), now, config)
        changed = score_batch(checked.samples, rows, {}, ScoreConfig()).rows
        reported = {g.uuid for s in checked.samples for g in s.gpus}
        for node, row in changed.items():
            gone = set(prunable_slots(row, reported, now, config))
            rows[node] = keep_slots(row, [g for g in range(len(row)) if g not in gone])
        assert len(rows["a"]) <= 3
        assert "real" in rows["a"]
    assert sum(u.startswith("fresh-") for u in rows["a"]) == 2


def test_settings_carry_the_bounds_and_the_cap_is_the_schemas_record_limit() -> None:
    settings = ScorerSettings(sample_key_ring_file=TEST_KEY_RING)
    config = settings.identity_config()
    assert (config.max_future_skew_s, config.max_gpus_per_node) == (120.0, 64)
    per_record = NodeSample.model_json_schema()["properties"]["gpus"]["maxItems"]
    assert config.max_gpus_per_node == per_record == IdentityConfig().max_gpus_per_node
    custom = ScorerSettings(
        sample_key_ring_file=TEST_KEY_RING, max_future_skew_s=5, max_gpus_per_node=8
    ).identity_config()
    assert (custom.max_future_skew_s, custom.max_gpus_per_node) == (5, 8)


def test_an_operators_pin_wins_over_the_first_reporter() -> None:
    rows = rows_after([sample("a", T0, "g1")])
    batch = [sample("b", T0 + 30 * S, "g1"), sample("a", T0 + 30 * S, "g1")]
    checked = check_batch(batch, rows, bindings_of(rows, {"g1": "b"}), T0, CONFIG)
    assert [(r.position, r.reason) for r in checked.refused] == [(1, "quarantine")]
    assert [s.node for s in checked.samples] == ["b"]


def test_a_row_that_drops_a_uuid_no_longer_binds_it() -> None:
    rows = rows_after([sample("a", T0, "g1", "g2")])
    bindings = bindings_of(rows)
    assert bindings.bound_node("g2", T0, CONFIG) == "a"
    bindings.index(keep_slots(rows["a"], [0]))
    assert bindings.bound_node("g2", T0, CONFIG) is None
    assert bindings.may_speak("b", "g2", T0, CONFIG)
    assert not bindings.may_speak("b", "g1", T0, CONFIG)
    assert len(bindings) == 1


def test_the_newest_live_holder_is_bound() -> None:
    a = rows_after([sample("a", T0, "g1")])["a"]
    b = rows_after([sample("b", T0 + 60 * S, "g1")])["b"]
    bindings = bindings_of({"a": a, "b": b})
    assert bindings.bound_node("g1", T0 + 60 * S, CONFIG) == "b"
    assert bindings.bound_node("g1", T0 + 1861 * S, CONFIG) is None  # both expired


def test_keeping_slots_trims_the_rows_to_the_widest_kept_gpu() -> None:
    history = [sample("a", T0 + i * 30 * S, "old", "new") for i in range(3)]
    history += [sample("a", T0 + 120 * S, "new")]
    state = rows_after(history)["a"]
    assert state.kept.shape[1] == 4
    kept = keep_slots(state, [0])
    assert kept.uuids == ("old",)
    assert kept.kept.shape[1] == 3
    np.testing.assert_array_equal(kept["old"].kept, state["old"].kept)
    assert kept["old"].filtered == state["old"].filtered


def test_expired_gpus_are_pruned_unless_the_batch_reported_them() -> None:
    state = rows_after([sample("a", T0, "g1", "g2")])["a"]
    later = T0 + 1801 * S
    assert expired_slots(state, later, CONFIG) == [0, 1]
    assert prunable_slots(state, {"g1"}, later, CONFIG) == [1]
    assert prunable_slots(state, {"g1"}, T0 + 1800 * S, CONFIG) == []


def test_quarantined_uuids_leave_the_gauge_after_the_expiry_or_a_pin() -> None:
    quarantined = Quarantined()
    quarantined.note("g1", "b", T0)
    quarantined.note("g2", "c", T0 + 100 * S)
    quarantined.prune(T0 + 1000 * S, CONFIG, {"g2": "c"})
    assert len(quarantined) == 1
    quarantined.prune(T0 + 1801 * S, CONFIG, {})
    assert len(quarantined) == 0


@pytest.mark.parametrize(
    "config",
    [
        {"gpu_expire_after_s": 0},
        {"replay_tolerance_s": -1},
        {"max_future_skew_s": 0},
        {"max_gpus_per_node": 0},
    ],
)
def test_config_is_validated(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        IdentityConfig(**config)


@pytest.mark.parametrize("text", ["[]", '{"g1": 3}', '{"g1": ""}', "{"])
def test_a_pins_file_must_be_an_object_of_node_names(text: str) -> None:
    with pytest.raises(ValueError, match="pinned bindings: not"):
        parse_pins(text)


def test_pins_are_re_read_when_the_file_changes_and_kept_when_it_breaks(tmp_path: Path) -> None:
    path = tmp_path / "pins.json"
    pinned = pinned_bindings(path)
    assert pinned.current() == {}  # missing: none yet
    path.write_text('{"g1": "b"}')
    assert pinned.current() == {"g1": "b"}
    path.write_text("{broken")
    os.utime(path, ns=(1, 1))
    assert pinned.current() == {"g1": "b"}
    path.write_text('{"g1": "c"}')
    os.utime(path, ns=(2, 2))
    assert pinned.current() == {"g1": "c"}
