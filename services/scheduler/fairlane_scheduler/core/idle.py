"""Which running placements hold GPUs they do not use (pure): the decision behind the
``idle`` event on ``fairlane.placements.v1``.

The signal is each score record's ``activity`` (the GPU's own compute activity in its
newest sample: max of SM activity and utilization, which load masking hides from the
components). A GPU is idle since the first record of its current run of records that
were fresh, not stale and under ``IdlePolicy.threshold``; a record at or above it, a
stale one or one without activity ends the run. A placement is idle when every GPU it
holds is idle now (its newest record is fresh) and has been for ``window_s``, counted
from no earlier than when the placement got its GPUs: a GPU with no fresh data is never
idle, and neither is a job that has just started.

Records come at each score change or heartbeat (the scorer's ``heartbeat_s``, 60 s by
default), so the window sees a GPU a few times a minute: a job busy only between two
heartbeats can be taken for idle. That is why the event only warns, and only a
namespace's policy, after the warning, shortens the placement's lease; nothing here
releases anything.

An episode is over when any GPU of the placement reports activity at or above the
threshold (fresh): the placement may be announced again after another window of idling
that began after that record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fairlane_events.records import GpuScore, PlacementEvent
from fairlane_scheduler.core.placements import Placement, event_fields

__all__ = ["GpuIdleness", "IdlePolicy", "IdleTracker", "idle_event"]


@dataclass(frozen=True)
class IdlePolicy:
    """``threshold``: activity (0..1) under which a GPU counts as idle (0.05: a job that
    waits for data or a debugger, not one that computes); ``window_s``: how long every
    GPU of a placement must stay so; ``stale_after_s``: an older record says nothing."""

    threshold: float = 0.05
    window_s: float = 600.0
    stale_after_s: float = 180.0

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1 or self.window_s <= 0 or self.stale_after_s <= 0:
            raise ValueError("0 < threshold <= 1, window_s > 0 and stale_after_s > 0 required")


@dataclass(frozen=True)
class GpuIdleness:
    """One GPU as its records said: the newest record's time, since when the current run
    of idle records goes (None: the newest is not idle), and whether the newest said busy
    (fresh activity at or above the threshold)."""

    ts_ms: int
    idle_since_ms: int | None
    busy: bool


class IdleTracker:
    """Each GPU's :class:`GpuIdleness`, from the score records as they arrive."""

    def __init__(self, policy: IdlePolicy) -> None:
        self.policy = policy
        self._gpus: dict[str, GpuIdleness] = {}

    def observe(self, score: GpuScore) -> None:
        """Take one score record (one not newer than the GPU's last is ignored)."""
        known = self._gpus.get(score.uuid)
        if known is not None and score.ts_ms <= known.ts_ms:
            return
        activity = None if score.stale else score.activity
        if activity is not None and activity < self.policy.threshold:
            run = None if known is None else known.idle_since_ms
            self._gpus[score.uuid] = GpuIdleness(score.ts_ms, run or score.ts_ms, busy=False)
        else:
            self._gpus[score.uuid] = GpuIdleness(score.ts_ms, None, busy=activity is not None)

    def _fresh(self, state: GpuIdleness, now_ms: int) -> bool:
        return state.ts_ms >= now_ms - self.policy.stale_after_s * 1000

    def idle_gpus(self, now_ms: int) -> list[str]:
        """GPUs idle now (fresh) for the whole window: the only ones whose placements
        need looking up."""
        before_ms = now_ms - self.policy.window_s * 1000
        return [
            uuid
            for uuid, state in self._gpus.items()
            if state.idle_since_ms is not None
            and state.idle_since_ms <= before_ms
            and self._fresh(state, now_ms)
        ]

    def idle_since(self, gpus: Iterable[str], placed_at_ms: int, now_ms: int) -> int | None:
        """When the placement holding ``gpus`` since ``placed_at_ms`` became idle, if it
        has been for the whole window at ``now_ms``; None: it is not idle (yet)."""
        since = placed_at_ms
        for uuid in gpus:
            state = self._gpus.get(uuid)
            if state is None or state.idle_since_ms is None or not self._fresh(state, now_ms):
                return None
            since = max(since, state.idle_since_ms)
        return since if since <= now_ms - self.policy.window_s * 1000 else None

    def busy_at(self, gpus: Iterable[str], now_ms: int) -> int | None:
        """When some GPU of ``gpus`` last reported fresh activity at or above the
        threshold (the end of a placement's idle episode); None: none did."""
        times = [
            state.ts_ms
            for uuid in gpus
            if (state := self._gpus.get(uuid)) is not None
            and state.busy
            and self._fresh(state, now_ms)
        ]
        return max(times, default=None)


def idle_event(
    placement: Placement,
    idle_since_ms: int,
    ts_ms: int,
    policy: IdlePolicy,
    lease_expires_ms: int | None,
) -> PlacementEvent:
    """The ``idle`` record of ``placement``: its assignment unchanged, since when it has
    idled, and its lease when the namespace's policy shortened it."""
    gpus = sum(len(node.gpus) for node in placement.nodes)
    reason = (
        f"all {gpus} GPUs under {policy.threshold:.0%} activity for "
        f"{(ts_ms - idle_since_ms) / 1000:.0f} s"
    )
    if lease_expires_ms is not None:
        reason += "; the namespace's idle policy shortened the lease"
    return PlacementEvent(
        **event_fields(placement, ts_ms),
        event="idle",
        reason=reason,
        idle_since_ms=idle_since_ms,
        lease_expires_ms=lease_expires_ms,
    )
