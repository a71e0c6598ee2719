"""Which learned speeds to publish, and as what (pure: time is an argument).

A published speed is the learner's estimate (:func:`estimate`, shrunk toward the GPU's
NVML prior) read against its peers: divided by the median estimate of the GPUs of the
same model learned under the same job class (:func:`peer_relative`'s reading), once at
least ``min_peers`` of them are; until then, the estimate as it is (pinned by the priors
alone). The 95 % interval is scaled with it.

A key whose GPU left the fleet (:func:`fairlane_scorer.core.speeds.gone`) is forgotten
(:meth:`SpeedBook.forget`) and tombstoned by the caller.

A record of a key goes out when its published speed moved by more than ``epsilon``
since the last one, when ``heartbeat_s`` passed since the last one, or the first time
the book sees it. A GPU's published speed also moves when its peers' median does: when
a group's median moves by more than ``epsilon``, every GPU of the group is looked at.

:class:`SpeedBook` holds what this needs between batches (the latest estimates by group,
the last published speeds) in memory; it is rebuilt from the table (:meth:`prime`) after
a start or a rebalance, and the heartbeat then re-sends every speed once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from fairlane_events.records import GpuSpeed
from fairlane_scorer.core.speeds import SpeedRow, split_key
from fairlane_scoring.learned_speed import LearnedSpeed, LearnerConfig, estimate

__all__ = ["PublishConfig", "SpeedBook", "speed_record"]

Group = tuple[str, str]  # (GPU model, job class)

#: Published speeds stay inside the record's bounds (0, 1000].
_LOWEST, _HIGHEST = 1e-6, 1000.0


@dataclass(frozen=True)
class PublishConfig:
    epsilon: float = 0.01  # a move of the published speed worth a record
    heartbeat_s: float = 300.0  # at least this often per key
    min_peers: int = 3  # GPUs of a model and class learned before speeds are peer-relative
    retention_s: float = 7 * 86_400.0  # a GPU neither sampled nor reported on this long...
    # ...is gone from the fleet: its rows are dropped and its keys tombstoned

    def __post_init__(self) -> None:
        if self.epsilon < 0 or self.heartbeat_s <= 0 or self.min_peers < 1:
            raise ValueError("epsilon >= 0, heartbeat_s > 0 and min_peers >= 1 required")
        if self.retention_s <= 0:
            raise ValueError("retention_s > 0 required")


def _bounded(speed: float) -> float:
    return min(_HIGHEST, max(_LOWEST, speed))


def speed_record(
    key: str, row: SpeedRow, learned: LearnedSpeed, peer_median: float | None, now_ms: int
) -> GpuSpeed:
    """The record of one key: ``learned`` over ``peer_median`` (None: as it is)."""
    uuid, job_class = split_key(key)
    scale = 1.0 if not peer_median else 1.0 / peer_median
    return GpuSpeed(
        schema_="gpu-speed/1",
        uuid=uuid,
        node=row.node,
        model=row.model,
        job_class=job_class,
        speed=_bounded(learned.speed * scale),
        low=_bounded(learned.low * scale),
        high=_bounded(learned.high * scale),
        reports=row.state.reports,
        confidence=min(1.0, max(0.0, learned.confidence)),
        ts_ms=now_ms,
    )


class SpeedBook:
    def __init__(self, learner: LearnerConfig, config: PublishConfig) -> None:
        self._learner, self._config = learner, config
        self.reset()

    def reset(self) -> None:
        """Forget everything (the table's partition moved): :meth:`prime` again."""
        self._raw: dict[str, float] = {}  # key -> its latest estimate
        self._groups: dict[Group, set[str]] = defaultdict(set)
        self._group_of: dict[str, Group] = {}
        self._medians: dict[Group, float | None] = {}
        # key -> (speed, ms, model) sent last
        self._published: dict[str, tuple[float, int, str]] = {}
        self.primed = False

    def prime(self, rows: Mapping[str, SpeedRow], priors: Mapping[str, float], now_ms: int) -> None:
        """Estimate every row and its group's median, publishing nothing."""
        for key, row in rows.items():
            self._estimate(key, row, priors, now_ms)
        for group in self._groups:
            self._medians[group] = self._median(group)
        self.primed = True

    def changed(
        self,
        rows: Mapping[str, SpeedRow],
        keys: Iterable[str],
        priors: Mapping[str, float],
        now_ms: int,
    ) -> list[tuple[str, GpuSpeed]]:
        """The records due now that the rows of ``keys`` changed: theirs, and those of
        their groups' other GPUs where a group's median moved."""
        learned = {k: self._estimate(k, rows[k], priors, now_ms) for k in keys if k in rows}
        candidates = set(learned) | self._remedian({self._group_of[k] for k in learned})
        return self._due(rows, candidates, learned, priors, now_ms, force=False)

    def heartbeat(
        self, rows: Mapping[str, SpeedRow], priors: Mapping[str, float], now_ms: int
    ) -> list[tuple[str, GpuSpeed]]:
        """The records of every row not published for ``heartbeat_s`` (or ever)."""
        period_ms = self._config.heartbeat_s * 1000
        due = [
            key
            for key in rows
            if (last := self._published.get(key)) is None or now_ms - last[1] >= period_ms
        ]
        learned = {k: self._estimate(k, rows[k], priors, now_ms) for k in due}
        for group in {self._group_of[k] for k in learned}:
            self._medians[group] = self._median(group)
        return self._due(rows, due, learned, priors, now_ms, force=True)

    def forget(
        self,
        rows: Mapping[str, SpeedRow],
        keys: Iterable[str],
        priors: Mapping[str, float],
        now_ms: int,
    ) -> list[tuple[str, GpuSpeed]]:
        """Forget the keys whose rows are gone (the caller tombstones them); the records
        due where a group's median moved without them."""
        groups = set()
        for key in keys:
            group = self._group_of.pop(key, None)
            if group is not None:
                self._groups[group].discard(key)
                groups.add(group)
            self._raw.pop(key, None)
            self._published.pop(key, None)
        return self._due(rows, self._remedian(groups), {}, priors, now_ms, force=False)

    def _remedian(self, groups: Iterable[Group]) -> set[str]:
        """Each group's median again; the keys of the groups where it moved."""
        moved: set[str] = set()
        for group in groups:
            old, new = self._medians.get(group), self._median(group)
            self._medians[group] = new
            if _moved(old, new, self._config.epsilon):
                moved |= self._groups[group]
        return moved

    def _estimate(
        self, key: str, row: SpeedRow, priors: Mapping[str, float], now_ms: int
    ) -> LearnedSpeed:
        uuid, job_class = split_key(key)
        learned = estimate(row.state, now_ms, self._learner, priors.get(uuid, 0.0))
        group = (row.model, job_class)
        old = self._group_of.get(key)
        if old != group:
            if old is not None:
                self._groups[old].discard(key)
            self._groups[group].add(key)
            self._group_of[key] = group
        self._raw[key] = learned.speed
        return learned

    def _median(self, group: Group) -> float | None:
        keys = self._groups.get(group, set())
        if len(keys) < self._config.min_peers:
            return None
        return float(np.median([self._raw[k] for k in keys]))

    def _due(
        self,
        rows: Mapping[str, SpeedRow],
        candidates: Collection[str],
        learned: Mapping[str, LearnedSpeed],
        priors: Mapping[str, float],
        now_ms: int,
        *,
        force: bool,
    ) -> list[tuple[str, GpuSpeed]]:
        period_ms = self._config.heartbeat_s * 1000
        out = []
        for key in sorted(candidates):
            row = rows.get(key)
            if row is None:
                continue
            estimated = learned.get(key) or self._estimate(key, row, priors, now_ms)
            median = self._medians.get(self._group_of[key])
            record = speed_record(key, row, estimated, median, now_ms)
            last = self._published.get(key)
            if (
                force
                or last is None
                or abs(record.speed - last[0]) > self._config.epsilon
                or now_ms - last[1] >= period_ms
                or record.model != last[2]  # the scores named the GPU's model late
            ):
                out.append((key, record))
                self._published[key] = (record.speed, now_ms, record.model)
        return out


def _moved(old: float | None, new: float | None, epsilon: float) -> bool:
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(new / old - 1.0) > epsilon
