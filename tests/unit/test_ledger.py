"""The in-memory ledger of live holdings (reservations, own commits, and snapshots of
the committed rows that may be older than own changes), and what the fleet view keeps
for it and for followers of score changes."""

from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.ledger import Holding, Ledger
from fairlane_scheduler.core.shares import GpuUse
from tests.factories import gpu_score


def holding(pid: str, *gpus: str, port: int = 29500, namespace: str = "a") -> Holding:
    return Holding(pid, namespace, "n1", port, gpus, tuple("H100" for _ in gpus))


def snapshot(ledger: Ledger, live: list[Holding], since: int) -> None:
    """A snapshot of ``live`` as the service takes one: the ids, and the holdings of
    those the ledger does not know."""
    unknown = set(ledger.unknown(h.placement_id for h in live))
    ledger.replace(
        [h.placement_id for h in live],
        [h for h in live if h.placement_id in unknown],
        since,
    )


def test_reservations_and_commits_hold_gpus_ports_and_usage() -> None:
    ledger = Ledger()
    ledger.reserve(holding("p1", "g1", "g2"))
    assert (set(ledger.gpus), set(ledger.ports("n1")), dict(ledger.usage("a"))) == (
        {"g1", "g2"},
        {29500},
        {"H100": 2},
    )
    ledger.commit(holding("p1", "g1", "g2", port=29501))  # the store gave another port
    assert set(ledger.ports("n1")) == {29501}
    ledger.release("p1")
    assert (list(ledger.gpus), list(ledger.ports("n1")), dict(ledger.usage("a"))) == ([], [], {})


def test_a_commit_equal_to_its_reservation_takes_it_over_untouched() -> None:
    fleet = FleetView(StabilityPolicy(0.65, 120))
    fleet.apply(gpu_score(node="n1", uuid="g1", index=0))
    ledger = Ledger(fleet)
    ledger.reserve(holding("p1", "g1", "g2"))
    changes = fleet.changes
    ledger.commit(holding("p1", "g1", "g2"))
    assert fleet.changes == changes  # no GPU let go and taken again: nothing to recompute
    assert (set(ledger.gpus), set(ledger.ports("n1")), dict(ledger.usage("a"))) == (
        {"g1", "g2"},
        {29500},
        {"H100": 2},
    )
    assert ledger.holds("p1")
    assert list(fleet.held_rows()) == [0]
    ledger.unreserve("p1")  # what the service does after any write: nothing, once committed
    assert set(ledger.gpus) == {"g1", "g2"}
    ledger.release("p1")
    assert (list(ledger.gpus), list(ledger.ports("n1")), dict(ledger.usage("a"))) == ([], [], {})
    assert list(fleet.held_rows()) == []


def test_a_failed_write_gives_its_reservation_back() -> None:
    ledger = Ledger()
    ledger.reserve(holding("p1", "g1"))
    ledger.unreserve("p1")
    assert list(ledger.gpus) == []


def test_a_snapshot_older_than_own_changes_does_not_undo_them() -> None:
    ledger = Ledger()
    ledger.commit(holding("old", "g0"))
    since = ledger.seq  # a snapshot is read from here on...
    ledger.commit(holding("p1", "g1"))  # ...while this commits...
    ledger.release("old")  # ...and this ends
    ledger.reserve(holding("p2", "g2", port=29502))  # and this is being written
    snapshot(ledger, [holding("old", "g0"), holding("other", "g9", port=29509)], since)
    assert set(ledger.gpus) == {"g1", "g2", "g9"}
    assert set(ledger.ports("n1")) == {29500, 29502, 29509}
    # A later snapshot that shows everything settles it; the journal is trimmed.
    snapshot(ledger, [holding("p1", "g1"), holding("other", "g9", port=29509)], ledger.seq)
    assert set(ledger.gpus) == {"g1", "g2", "g9"}


def test_a_snapshot_brings_other_replicas_changes() -> None:
    ledger = Ledger()
    ledger.commit(holding("mine", "g1"))
    snapshot(ledger, [holding("mine", "g1"), holding("theirs", "g2", namespace="b")], ledger.seq)
    assert set(ledger.gpus) == {"g1", "g2"}
    assert dict(ledger.usage("b")) == {"H100": 1}
    snapshot(ledger, [holding("mine", "g1")], ledger.seq)  # theirs was released
    assert set(ledger.gpus) == {"g1"}
    assert dict(ledger.usage("b")) == {}


def test_the_fleet_view_learns_which_rows_are_held_even_before_their_scores() -> None:
    fleet = FleetView(StabilityPolicy(0.65, 120))
    ledger = Ledger(fleet)  # the view is empty when the service starts
    fleet.apply(gpu_score(node="n1", uuid="g1", index=0))
    ledger.reserve(holding("p1", "g1", "g2"))  # g2's score has not come yet
    assert list(fleet.held_rows()) == [0]
    fleet.apply(gpu_score(node="n1", uuid="g2", index=1))
    assert list(fleet.held_rows()) == [0, 1]
    ledger.unreserve("p1")
    assert list(fleet.held_rows()) == []
    snapshot(ledger, [holding("p2", "g2")], ledger.seq)
    assert list(fleet.held_rows()) == [1]


def test_the_fleet_view_hands_out_each_changed_record_once() -> None:
    fleet = FleetView(StabilityPolicy(0.65, 120))
    fleet.apply(gpu_score(uuid="g1", ts_ms=1))
    fleet.apply(gpu_score(uuid="g1", ts_ms=2))
    fleet.apply(gpu_score(uuid="g2", index=1, ts_ms=1))
    assert sorted((r.uuid, r.ts_ms) for r in fleet.drain_changed()) == [("g1", 2), ("g2", 1)]
    assert fleet.drain_changed() == []
    fleet.apply(gpu_score(uuid="g2", index=1, ts_ms=3))
    assert [r.uuid for r in fleet.drain_changed()] == ["g2"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reserve", "commit", "fail", "release", "theirs", "end", "snap"]),
            st.integers(0, 7),
        ),
        max_size=60,
    )
)
def test_snapshots_index_what_changed_as_a_rebuild_would(steps: list[tuple[str, int]]) -> None:
    """Own reservations, commits, failed writes and releases, other replicas' placements
    and endings, and snapshots of the committed rows in any order: the ledger's GPUs,
    ports and usage and the fleet's held rows are always those of what it holds, and
    after a snapshot it holds what the database does (``database``, here)."""
    fleet = FleetView(StabilityPolicy(0.65, 120))
    for g in range(16):
        fleet.apply(gpu_score(node="n1", uuid=f"g{g}", index=g))
    ledger = Ledger(fleet)
    database: dict[str, Holding] = {}
    reserved: dict[str, Holding] = {}
    every: dict[str, Holding] = {}
    made = 0
    for step, k in steps:
        if step in ("reserve", "theirs"):  # a new placement on free GPUs (ports may repeat)
            free = [f"g{g}" for g in range(16) if f"g{g}" not in ledger.gpus]
            taken = {g for h in database.values() for g in h.gpus}
            free = [g for g in free if g not in taken][: 1 + k % 2]
            if not free:
                continue
            made += 1
            new = every[f"p{made}"] = holding(
                f"p{made}", *free, port=29500 + k % 3, namespace="ab"[k % 2]
            )
            if step == "reserve":
                ledger.reserve(reserved.setdefault(new.placement_id, new))
            else:
                database[new.placement_id] = new  # another replica's, unseen until a snapshot
        elif step in ("commit", "fail") and reserved:
            pid = sorted(reserved)[k % len(reserved)]
            if step == "commit":
                database[pid] = reserved[pid]
                ledger.commit(reserved[pid])
            ledger.unreserve(pid)
            del reserved[pid]
        elif step in ("release", "end") and database:
            pid = sorted(database)[k % len(database)]
            del database[pid]
            if step == "release":
                ledger.release(pid)
        elif step == "snap":
            live = list(database)
            unknown = set(ledger.unknown(live))
            ledger.replace(live, [database[p] for p in live if p in unknown], ledger.seq)
            assert {p for p in database if ledger.holds(p)} == set(database)
        held = [*(h for p, h in every.items() if ledger.holds(p)), *reserved.values()]
        gpus = {g for h in held for g in h.gpus}
        assert set(ledger.gpus) == gpus
        assert set(ledger.ports("n1")) == {h.port for h in held}
        for namespace in "ab":
            wanted = Counter(m for h in held if h.namespace == namespace for m in h.models)
            assert dict(ledger.usage(namespace)) == dict(wanted)
        assert {f"g{r}" for r in fleet.held_rows().tolist()} == gpus


def test_a_shared_gpu_is_held_while_any_share_lives_and_counts_its_part() -> None:
    fleet = FleetView(StabilityPolicy(0.65, 120))
    fleet.apply(gpu_score(node="n1", uuid="g1", index=0))
    ledger = Ledger(fleet)
    quarter = replace(holding("s1", "g1"), share=GpuUse(250, 1024, 1))
    half = replace(holding("s2", "g1", port=29501), share=GpuUse(500, 2048, 1))
    ledger.commit(quarter)
    ledger.reserve(half)
    assert (ledger.shares("g1"), set(ledger.shared_gpus), list(fleet.held_rows())) == (
        (750, 3072, 2),
        {"g1"},
        [0],
    )
    assert dict(ledger.usage("a")) == {"H100": 0.75}
    ledger.release("s1")
    assert ledger.shares("g1") == (500, 2048, 1)
    assert list(fleet.held_rows()) == [0]  # the reserved share still holds it
    ledger.unreserve("s2")
    assert (ledger.shares("g1"), list(ledger.gpus), list(fleet.held_rows())) == ((0, 0, 0), [], [])
    assert dict(ledger.usage("a")) == {}
