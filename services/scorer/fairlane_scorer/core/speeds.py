"""The learner's state and its step over one joined progress report (pure).

The model and its statistics are :mod:`fairlane_scoring.learned_speed`'s; this module
keeps them as the scorer's table does. One row per (GPU, job class), key
``"<uuid>/<job class>"`` (a job class has no "/"): the :class:`SpeedState` with where the
GPU is, what model it is, and the time of the newest report learned. Time is the
reports' own (``ts_ms``, the end of their window), so a report replayed after a crash
finds its time already learned and teaches nothing twice.

With cross-job learning on (``LearnerConfig.cross_job``), one more row per job class,
key ``"<job class>"`` in its own table: the class's :class:`ClassReference` (its recent
jobs' costs, :func:`encode_reference`), changed by each report of the class.

Each rank's catalogue speed (the ``v_m`` of the model) is its GPU model's relative speed
(:func:`fairlane_scorer.core.records.model_speed`); the NVML prior is the GPU's SM clock
while busy against its model's fleet median (:func:`clock_priors`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import orjson

from fairlane_scorer.core.progress import JoinedProgress
from fairlane_scorer.core.records import model_speed
from fairlane_scorer.core.speed_input import GpuInfo
from fairlane_scorer.errors import SpeedRowFormatError
from fairlane_scoring.class_reference import ClassReference, JobCost
from fairlane_scoring.learned_speed import (
    LearnerConfig,
    ProgressReport,
    RankReport,
    Running,
    SpeedState,
    clock_prior,
    observe_across,
)

__all__ = [
    "UNKNOWN_MODEL",
    "LearnResult",
    "SpeedRow",
    "clock_priors",
    "decode_reference",
    "decode_row",
    "encode_reference",
    "encode_row",
    "gone",
    "learn",
    "named",
    "speed_key",
    "split_key",
    "to_report",
]

#: The model of a GPU the scores have not named yet (its catalogue speed: the default).
UNKNOWN_MODEL = "unknown"

_FORMAT = "speed-row/1"
_REFERENCE_FORMAT = "class-reference/1"


@dataclass(frozen=True)
class SpeedRow:
    """What is known of one GPU under one job class, and where the GPU is."""

    state: SpeedState
    node: str
    model: str
    last_ts_ms: int  # the newest report learned: one not newer is a replay


def speed_key(uuid: str, job_class: str) -> str:
    """The row's key, and the speeds topic's: ``"<uuid>/<job class>"``."""
    return f"{uuid}/{job_class}"


def split_key(key: str) -> tuple[str, str]:
    """``(uuid, job class)`` of a key (a job class has no "/", a uuid may)."""
    uuid, _, job_class = key.rpartition("/")
    return uuid, job_class


def encode_row(row: SpeedRow) -> bytes:
    stats, state = row.state.stats, row.state
    return orjson.dumps(
        {
            "format": _FORMAT,
            "stats": [stats.weight, stats.mean, stats.m2, stats.updated_ms],
            "cusum": [state.cusum_up, state.cusum_down],
            "reports": state.reports,
            "changes": state.changes,
            "node": row.node,
            "model": row.model,
            "last_ts_ms": row.last_ts_ms,
        }
    )


def decode_row(data: bytes) -> SpeedRow:
    """A row :func:`encode_row` wrote, or :class:`SpeedRowFormatError`."""
    try:
        raw: Any = orjson.loads(data)
        if raw.get("format") != _FORMAT:
            raise SpeedRowFormatError(f"unknown speed-row format {raw.get('format')!r}")
        weight, mean, m2, updated_ms = raw["stats"]
        up, down = raw["cusum"]
        state = SpeedState(
            Running(float(weight), float(mean), float(m2), int(updated_ms)),
            float(up),
            float(down),
            int(raw["reports"]),
            int(raw["changes"]),
        )
        return SpeedRow(state, str(raw["node"]), str(raw["model"]), int(raw["last_ts_ms"]))
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SpeedRowFormatError):
            raise
        raise SpeedRowFormatError(f"not a speed row: {exc!r}") from exc


def encode_reference(reference: ClassReference) -> bytes:
    return orjson.dumps(
        {
            "format": _REFERENCE_FORMAT,
            "costs": [[c.job, c.log_cost, c.updated_ms, c.reports] for c in reference.costs],
        }
    )


def decode_reference(data: bytes) -> ClassReference:
    """A class's reference :func:`encode_reference` wrote, or :class:`SpeedRowFormatError`."""
    try:
        raw: Any = orjson.loads(data)
        if raw.get("format") != _REFERENCE_FORMAT:
            raise SpeedRowFormatError(f"unknown class-reference format {raw.get('format')!r}")
        return ClassReference(
            tuple(
                JobCost(str(job), float(cost), int(updated_ms), int(reports))
                for job, cost, updated_ms, reports in raw["costs"]
            )
        )
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SpeedRowFormatError):
            raise
        raise SpeedRowFormatError(f"not a class reference: {exc!r}") from exc


def clock_priors(infos: Mapping[str, GpuInfo], config: LearnerConfig) -> dict[str, float]:
    """Each GPU's NVML prior (log speed, :func:`clock_prior`): its SM clock while busy
    against the median of its model's GPUs seen busy. A GPU not seen busy has none (0:
    speed 1.0)."""
    by_model: dict[str, list[float]] = defaultdict(list)
    for info in infos.values():
        if info.busy_clock_mhz is not None:
            by_model[info.model].append(info.busy_clock_mhz)
    medians = {model: float(np.median(clocks)) for model, clocks in by_model.items()}
    return {
        uuid: clock_prior(info.busy_clock_mhz, medians[info.model], config)
        for uuid, info in infos.items()
        if info.busy_clock_mhz is not None
    }


def _model_of(uuid: str, infos: Mapping[str, GpuInfo]) -> str:
    info = infos.get(uuid)
    return UNKNOWN_MODEL if info is None else info.model


def to_report(joined: JoinedProgress, infos: Mapping[str, GpuInfo]) -> ProgressReport:
    """The learner's view of a joined report: each rank's time and its model's speed,
    the job its placement."""
    return ProgressReport(
        job_class=joined.job_class,
        window_s=joined.window_s,
        ranks=tuple(
            RankReport(r.uuid, r.compute_s_per_step, model_speed(_model_of(r.uuid, infos))[0])
            for r in joined.ranks
        ),
        job=joined.placement_id,
    )


@dataclass(frozen=True)
class LearnResult:
    """The rows a report changed, whether it was a replay (every rank's GPU had
    learned it, or a newer report, already), and its class's new reference (None:
    unchanged)."""

    rows: dict[str, SpeedRow]
    replayed: bool
    reference: ClassReference | None = None


def learn(
    rows: Mapping[str, SpeedRow],
    joined: JoinedProgress,
    infos: Mapping[str, GpuInfo],
    priors: Mapping[str, float],
    config: LearnerConfig,
    *,
    reference: ClassReference | None = None,
) -> LearnResult:
    """The rows after one report (:func:`observe_across` at the report's time, with the
    class's ``reference`` when the learner learns across jobs). A GPU whose row already
    holds a report at least as new learns nothing from it; the others learn as if it
    were the first time (the replayed GPUs' estimates stand for the job's cost). A
    replay leaves the reference as it was."""
    keys = [speed_key(r.uuid, joined.job_class) for r in joined.ranks]
    fresh = {k for k in keys if (row := rows.get(k)) is None or row.last_ts_ms < joined.ts_ms}
    if not fresh:
        return LearnResult({}, replayed=True)
    states = {
        (rank.uuid, joined.job_class): row.state
        for rank, key in zip(joined.ranks, keys, strict=True)
        if (row := rows.get(key)) is not None
    }
    report = to_report(joined, infos)
    observed, new_reference = observe_across(
        states, reference, report, joined.ts_ms, config=config, priors=priors
    )
    changed: dict[str, SpeedRow] = {}
    for rank in joined.ranks:
        key = speed_key(rank.uuid, joined.job_class)
        state = observed.get((rank.uuid, joined.job_class))
        if state is None or key not in fresh:
            continue
        previous = rows.get(key)
        model = _model_of(rank.uuid, infos)
        if model == UNKNOWN_MODEL and previous is not None:
            model = previous.model
        changed[key] = SpeedRow(state, rank.node, model, joined.ts_ms)
    return LearnResult(changed, replayed=False, reference=new_reference)


def gone(
    rows: Mapping[str, SpeedRow],
    infos: Mapping[str, GpuInfo],
    event_ms: int,
    retention_ms: int,
) -> tuple[list[str], list[str]]:
    """What the learner forgets of GPUs gone from the fleet, now that its event time is
    ``event_ms``: the rows (keys) whose GPU has neither reported under their class (the
    row's ``last_ts_ms``) nor been sampled (its info's ``seen_ms``) for ``retention_ms``,
    and the infos (uuids) of GPUs not sampled for as long that have no row left."""
    horizon = event_ms - retention_ms
    seen = {uuid: info.seen_ms for uuid, info in infos.items() if info.seen_ms is not None}
    rows_gone = [
        key
        for key, row in rows.items()
        if max(row.last_ts_ms, seen.get(split_key(key)[0], row.last_ts_ms)) < horizon
    ]
    dropped = set(rows_gone)
    kept = {split_key(key)[0] for key in rows if key not in dropped}
    infos_gone = [uuid for uuid, seen_ms in seen.items() if seen_ms < horizon and uuid not in kept]
    return rows_gone, infos_gone


def named(
    rows: Mapping[str, SpeedRow], info: GpuInfo, job_classes: Iterable[str]
) -> dict[str, SpeedRow]:
    """The rows of ``info``'s GPU learned before the scores named its model (a backlog
    read in another order than it was written), with that model."""
    out = {}
    for job_class in job_classes:
        key = speed_key(info.uuid, job_class)
        row = rows.get(key)
        if row is not None and row.model == UNKNOWN_MODEL and info.model != UNKNOWN_MODEL:
            out[key] = replace(row, model=info.model)
    return out
