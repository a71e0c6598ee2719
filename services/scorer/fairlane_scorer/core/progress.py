"""Job-progress records joined with the placements they report on (pure).

A job's ranks say which GPU each ran on; that claim is never taken on trust. The
``placement-gpus`` table holds, per live placement (key = placement id, co-partitioned
with ``fairlane.placements.v1`` and ``fairlane.job-progress.v1``), the GPUs its
allocation holds and their nodes. A progress record is accepted only when its placement
is live (or ended after the record's window began: a job's last reports may be read after
its end event, and the row stays for them a while) and every rank names one of its GPUs;
each rank then carries the node the allocation put it on. What is accepted travels to
the learner as a :class:`JoinedProgress` (:mod:`fairlane_scorer.core.speed_input`).

Rejections say why, by a reason from a closed set (the label of the rejection counter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import JobProgress, PlacementEvent
from fairlane_scorer.core.allocations import ENDING_EVENTS

__all__ = [
    "FOREIGN_GPU",
    "FUTURE",
    "HOLD_FULL",
    "INVALID",
    "MAX_AHEAD_MS",
    "RATE_LIMITED",
    "REASONS",
    "UNKNOWN_PLACEMENT",
    "WRONG_KEY",
    "JoinedProgress",
    "JoinedRank",
    "PlacementChange",
    "ProgressRejection",
    "decode_progress",
    "join_progress",
    "placement_change",
]

#: Why a progress record was rejected (every one is dead-lettered and counted).
INVALID = "invalid"  # not the topic's schema
WRONG_KEY = "wrong_key"  # keyed otherwise than by its placement id
UNKNOWN_PLACEMENT = "unknown_placement"  # its placement did not arrive while it was held
FOREIGN_GPU = "foreign_gpu"  # a rank names a GPU its placement does not hold
FUTURE = "future"  # its window ends too far ahead of the scorer's clock
HOLD_FULL = "hold_full"  # held for its placement, and pushed out by newer ones
RATE_LIMITED = "rate_limited"  # over its placement's rate (core.rate_limit)
REASONS = (INVALID, WRONG_KEY, UNKNOWN_PLACEMENT, FOREIGN_GPU, FUTURE, HOLD_FULL, RATE_LIMITED)

#: How far a report's ``ts_ms`` may run ahead of the scorer's clock. The learner takes a
#: report not newer than a GPU's last one for a replay, so one stamped a year ahead would
#: silence every later report on its GPUs, whichever job sent them.
MAX_AHEAD_MS = 3600 * 1000

#: A live placement's GPUs: uuid -> the node its allocation holds it on.
PlacementGpus = Mapping[str, str]


@dataclass(frozen=True)
class PlacementChange:
    """What one placement event does to its ``placement-gpus`` row: store ``gpus``, or
    (``gpus`` None) end the placement (its row stays a while for its last reports)."""

    gpus: dict[str, str] | None


def placement_change(event: PlacementEvent) -> PlacementChange | None:
    """``created``: the placement holds these GPUs; ``released``/``expired``/``failed``:
    it holds none any more; ``pending``: nothing changes (None).
    Redelivery is harmless: the same event gives the same row."""
    if event.event == "created":
        return PlacementChange({g.uuid: a.node for a in event.nodes for g in a.gpus})
    if event.event in ENDING_EVENTS:
        return PlacementChange(None)
    return None


@dataclass(frozen=True)
class ProgressRejection:
    """Why a progress record is not learned from: one of :data:`REASONS`, in words."""

    reason: str
    error: str


@dataclass(frozen=True)
class JoinedRank:
    """One rank as the learner sees it: the GPU, where the allocation put it, its time."""

    uuid: str
    node: str
    compute_s_per_step: float


@dataclass(frozen=True)
class JoinedProgress:
    """A progress record whose ranks were checked against their placement's allocation."""

    placement_id: str
    job_class: str
    ts_ms: int
    window_s: float
    ranks: tuple[JoinedRank, ...]


def decode_progress(key: bytes | None, value: bytes | None) -> JobProgress | ProgressRejection:
    """Decode and validate a record of ``fairlane.job-progress.v1`` strictly; one keyed
    otherwise than by its placement id is rejected too (it may sit in another partition
    than its placement's row)."""
    try:
        progress = decode(JobProgress, value)
    except DecodeError as exc:
        return ProgressRejection(INVALID, str(exc))
    if key != progress.placement_id.encode():
        return ProgressRejection(
            WRONG_KEY, f"key {key!r} is not the placement id {progress.placement_id!r}"
        )
    return progress


def join_progress(
    progress: JobProgress, gpus: PlacementGpus | None, now_ms: int, ended_ms: int | None = None
) -> JoinedProgress | ProgressRejection:
    """``progress`` with each rank's node from its placement's allocation ``gpus`` (None:
    no placement of that id known), or why it cannot be. A placement that ended at
    ``ended_ms`` still vouches for the windows that began before its end (the job's last
    reports, read after its end event), never for a later one."""
    if progress.ts_ms > now_ms + MAX_AHEAD_MS:
        ahead_s = (progress.ts_ms - now_ms) / 1000
        return ProgressRejection(FUTURE, f"ts_ms is {ahead_s:.0f} s ahead of the scorer's clock")
    if gpus is None:
        return ProgressRejection(UNKNOWN_PLACEMENT, f"no live placement {progress.placement_id!r}")
    window_start_ms = progress.ts_ms - progress.window_s * 1000
    if ended_ms is not None and window_start_ms >= ended_ms:
        return ProgressRejection(
            UNKNOWN_PLACEMENT,
            f"placement {progress.placement_id!r} ended at {ended_ms}, before this window began",
        )
    foreign = [r.uuid for r in progress.ranks if r.uuid not in gpus]
    if foreign:
        shown = ", ".join(repr(u) for u in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        return ProgressRejection(
            FOREIGN_GPU,
            f"ranks name GPUs placement {progress.placement_id!r} does not hold: {shown}{more}",
        )
    return JoinedProgress(
        placement_id=progress.placement_id,
        job_class=progress.job_class,
        ts_ms=progress.ts_ms,
        window_s=progress.window_s,
        ranks=tuple(JoinedRank(r.uuid, gpus[r.uuid], r.compute_s_per_step) for r in progress.ranks),
    )
