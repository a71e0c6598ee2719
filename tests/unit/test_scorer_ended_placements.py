"""An ended placement's row stays for its last reports, then goes with the partition's
event time; the view survives a rebalance (rebuilt from the table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import faust
import orjson

from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.ended_placements import EndedPlacements

KEEP_S = 900.0
T0 = 1_700_000_000_000


@dataclass
class _App:
    consumer_generation_id: int = 1


@dataclass
class _Table:
    """What EndedPlacements reads of a Faust table: its data and its app's generation."""

    app: _App = field(default_factory=_App)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Changelog:
    """Records what would go to the table's changelog."""

    logged: list[tuple[int, str, bytes | None]] = field(default_factory=list)

    async def log(self, table: object, partition: int, key: str, encoded: bytes | None) -> None:
        self.logged.append((partition, key, encoded))


def _ended(table: _Table) -> EndedPlacements:
    return EndedPlacements(KEEP_S, cast("faust.Table[str, Any]", table))


async def test_an_end_is_kept_until_the_partitions_clock_passes_it_by_keep_s() -> None:
    table, log = _Table(), _Changelog()
    ended, out = _ended(table), cast(Deliveries, log)
    await ended.end(3, "p1", T0, out)
    await ended.end(3, "p1", T0 + 5_000, out)  # redelivered later: the first end holds
    await ended.end(4, "p2", T0, out)
    assert ended.ended_ms("p1") == T0
    assert log.logged[0] == (3, "p1", orjson.dumps([3, T0]))
    assert await ended.expire(3, T0 + int(KEEP_S * 1000), out) == []
    assert await ended.expire(3, T0, out) == []  # the clock never goes back
    assert await ended.expire(3, T0 + int(KEEP_S * 1000) + 1, out) == ["p1"]
    assert ended.ended_ms("p1") is None
    assert log.logged[-1] == (3, "p1", None)
    assert ended.ended_ms("p2") == T0  # another partition's clock did not move


async def test_after_a_rebalance_the_view_is_rebuilt_from_the_recovered_table() -> None:
    table = _Table(data={"p1": orjson.dumps([2, T0]), "p2": orjson.dumps([5, T0])})
    table.app.consumer_generation_id = 7
    ended, out = _ended(table), cast(Deliveries, _Changelog())
    assert ended.ended_ms("p1") == T0
    assert await ended.expire(2, T0 + int(KEEP_S * 1000) + 1, out) == ["p1"]
    assert set(table.data) == {"p2"}
