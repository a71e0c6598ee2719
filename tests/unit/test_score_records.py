"""The fleet's latest records, kept out of the garbage collector's walks."""

import gc

from fairlane_scheduler.core.fleet import FleetView
from tests.factories import gpu_score


def test_a_record_reads_back_equal_and_is_not_walked_by_the_collector() -> None:
    fleet = FleetView()
    record = gpu_score(uuid="GPU-1", components={"thermal": 0.5, "ecc": None})
    fleet.apply(record)
    assert fleet.records["GPU-1"] == record
    assert fleet.records["GPU-1"].components == {"thermal": 0.5, "ecc": None}
    assert dict(fleet.records) == {"GPU-1": record}
    assert "GPU-1" in fleet.records
    gc.collect(0)  # the youngest generation's collection: before it ever ages
    assert not gc.is_tracked(fleet.records._packed["GPU-1"])
    older = gpu_score(uuid="GPU-1", score=0.1, ts_ms=record.ts_ms - 1)
    assert not fleet.apply(older)
    assert fleet.records["GPU-1"].score == record.score


def test_fields_and_components_are_read_without_the_models() -> None:
    fleet = FleetView()
    fleet.apply(gpu_score(uuid="GPU-1", index=3, components={"health_gate": 0.0}))
    fleet.apply(gpu_score(uuid="GPU-2", components={}))
    assert list(fleet.records.columns("uuid", "index")) == [("GPU-1", 3), ("GPU-2", 0)]
    assert list(fleet.records.component("health_gate")) == [0.0, None]
