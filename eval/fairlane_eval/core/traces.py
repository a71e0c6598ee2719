"""Converters of the shipped public traces into :class:`~fairlane_eval.core.workload.Job`:

- :func:`gavel_trace_jobs`: Gavel's Philly-derived ``.trace`` files, steps as Gavel gives them;
- :func:`philly_jobs`: Pollux's copy of the Philly job log; a job keeps its traced duration
  on healthy reference GPUs, with a job type drawn from those Gavel measured at its size;
- :func:`pollux_workload_jobs`: Pollux's eight 160-job workloads; a job keeps the duration
  Pollux's own measurements give it at its fixed size on Pollux's T4 testbed.

Pure: text in, frozen values out; randomness is a seeded generator passed in.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime

import numpy as np

from fairlane_eval.core._csv import Row, rows, shipped_text
from fairlane_eval.core.throughputs import ThroughputTable, nearest_scale_factor
from fairlane_eval.core.workload import (
    Job,
    WorkloadError,
    by_arrival,
    gang_from_row,
    job_from_row,
)

__all__ = [
    "GAVEL_MULTI_WINDOW_S",
    "GAVEL_VCS",
    "PHILLY_10K_JOBS",
    "PHILLY_10K_START",
    "POLLUX_JOB_TYPES",
    "gavel_trace_jobs",
    "load_shipped_trace",
    "philly_jobs",
    "pollux_workload_jobs",
    "read_pollux_durations",
    "shipped_traces",
]

#: Gavel's Philly virtual clusters (traces/msr/seed=0), one trace each.
GAVEL_VCS = (
    "0e4a51", "103959", "11cb48", "23dbec", "2869ce", "51b7ef", "6214e9", "6c71a0",
    "795a4c", "7f04ca", "925e2b", "b436b2", "e13805", "ed69ec", "ee9e8c",
)  # fmt: skip
#: gavel-multi keeps each VC's first 30 days: Gavel cut every VC trace at 2,000 jobs and
#: the earliest cut (6c71a0's) falls at day 29.99, so every VC is complete in this window.
GAVEL_MULTI_WINDOW_S = 30 * 86_400.0
#: philly-10k starts at the first job of Monday 2017-10-02 in arrival order: the weeks
#: before are the log's sparse start (22 jobs in its first two weeks).
PHILLY_10K_START = 5_928
PHILLY_10K_JOBS = 10_000

#: Pollux application -> the closest Gavel job type (docs/evaluation-formats.md says why).
POLLUX_JOB_TYPES: Mapping[str, str] = {
    "cifar10": "ResNet-18 (batch size 256)",
    "imagenet": "ResNet-50 (batch size 128)",
    "yolov3": "ResNet-50 (batch size 16)",
    "bert": "Transformer (batch size 64)",
    "deepspeech2": "LM (batch size 40)",
    "ncf": "Recommendation (batch size 8192)",
}
_POLLUX_TESTBED_MODEL = "T4"
_GAVEL_FIELDS = (
    "job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
    "scale_factor",
)  # fmt: skip


def gavel_trace_jobs(
    text: str,
    namespace: str,
    *,
    gpus_per_node: int = 8,
    id_prefix: str | None = None,
    source: str = "<gavel trace>",
) -> list[Job]:
    """Gavel's tab-separated ``.trace``: one job a line, ids ``<id_prefix><line index>``.

    Fields: job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time (s),
    scale_factor (GPUs). ``total_steps`` is the work; a scale factor above ``gpus_per_node``
    becomes a multi-node gang (:func:`split_gang`).
    """
    prefix = f"{namespace}-" if id_prefix is None else id_prefix
    jobs = []
    for index, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        cells = line.split("\t")
        named = dict(zip(_GAVEL_FIELDS, cells, strict=False))
        row = Row(source, index + 1, named, WorkloadError)
        if len(cells) != len(_GAVEL_FIELDS):
            raise row.fail("(line)", f"expected 7 tab-separated fields, got {len(cells)}")
        _, per_node, nodes = gang_from_row(row, "scale_factor", gpus_per_node)
        jobs.append(
            job_from_row(
                row,
                {
                    "job_id": f"{prefix}{index}",
                    "arrival_s": row.number("arrival_time"),
                    "gpus_per_node": per_node,
                    "nodes": nodes,
                    "job_type": row.text("job_type"),
                    "work_steps": row.number("total_steps"),
                    "namespace": namespace,
                },
            )
        )
    return by_arrival(jobs)


def _types_at(throughputs: ThroughputTable, gpus: int, reference_model: str) -> tuple[str, ...]:
    """Job types measured at the scale factor nearest ``gpus`` that run on the reference."""
    types = throughputs.job_types()
    scale = nearest_scale_factor({s for t in types for s in throughputs.scale_factors(t)}, gpus)
    return tuple(
        t
        for t in types
        if scale in throughputs.scale_factors(t)
        and throughputs.steps_per_s(t, reference_model, gpus) > 0
    )


def philly_jobs(
    text: str,
    throughputs: ThroughputTable,
    rng: np.random.Generator,
    *,
    reference_model: str = "V100",
    gpus_per_node: int = 8,
    limit: int | None = None,
    start: int = 0,
    id_prefix: str = "philly-",
    source: str = "<philly csv>",
) -> list[Job]:
    """Pollux's ``philly_pollux_trace.csv`` (timestamp,duration,num_gpus,gpu_time,cluster).

    Jobs in submission order (ties in file order), ``limit`` of them from index ``start``;
    ids ``<id_prefix><index>``; arrival relative to the first kept job; namespace = the
    Philly virtual cluster. The log has no job types: each job draws one uniformly (one
    ``rng.random()`` per kept job) among the types measured at the scale factor nearest its
    GPU count, and gets ``work = duration x steps_per_s(type, reference_model, gpus)``, so
    it takes its traced duration on healthy ``reference_model`` GPUs.
    """
    parsed = []
    header = ("timestamp", "duration", "num_gpus", "cluster")
    for row in rows(text, header, source=source, error=WorkloadError):
        try:
            when = datetime.fromisoformat(row.text("timestamp")).replace(tzinfo=UTC)
        except ValueError:
            raise row.fail("timestamp", f"not a date and time: {row.text('timestamp')!r}") from None
        parsed.append((when, row))
    parsed.sort(key=lambda p: p[0])
    kept = parsed[start : None if limit is None else start + limit]
    if not kept:
        return []
    draws = rng.random(len(kept))
    candidates: dict[int, tuple[str, ...]] = {}
    jobs = []
    for offset, ((when, row), draw) in enumerate(zip(kept, draws, strict=True)):
        gpus, per_node, nodes = gang_from_row(row, "num_gpus", gpus_per_node)
        if gpus not in candidates:
            candidates[gpus] = _types_at(throughputs, gpus, reference_model)
        types = candidates[gpus]
        job_type = types[int(draw * len(types))]
        rate = throughputs.steps_per_s(job_type, reference_model, gpus)
        jobs.append(
            job_from_row(
                row,
                {
                    "job_id": f"{id_prefix}{start + offset}",
                    "arrival_s": (when - kept[0][0]).total_seconds(),
                    "gpus_per_node": per_node,
                    "nodes": nodes,
                    "job_type": job_type,
                    "work_steps": row.number("duration") * rate,
                    "namespace": row.text("cluster"),
                },
            )
        )
    return by_arrival(jobs)


PolluxConfig = tuple[str, int, int]  # (application, num_replicas, batch_size)


def read_pollux_durations(
    text: str, *, source: str = "<pollux durations>"
) -> dict[PolluxConfig, float]:
    """Seconds per Pollux configuration, as eval/scripts/derive_pollux_durations.py writes them."""
    header = ("application", "num_replicas", "batch_size", "duration_s")
    durations = {}
    for row in rows(text, header, source=source, error=WorkloadError):
        config = (row.text("application"), row.integer("num_replicas"), row.integer("batch_size"))
        durations[config] = row.number("duration_s")
    return durations


def pollux_workload_jobs(
    text: str,
    throughputs: ThroughputTable,
    *,
    durations: Mapping[PolluxConfig, float] | None = None,
    reference_model: str = _POLLUX_TESTBED_MODEL,
    gpus_per_node: int = 8,
    namespace: str = "default",
    source: str = "<pollux workload>",
) -> list[Job]:
    """Pollux's ``workload-N.csv`` (name,time,application,num_replicas,batch_size).

    The job type is :data:`POLLUX_JOB_TYPES` of the application; the work makes the job
    take ``durations[(application, num_replicas, batch_size)]`` seconds (Pollux's measured
    time at that fixed size on its T4s; the shipped table by default) on healthy
    ``reference_model`` GPUs: ``work = duration x steps_per_s(type, reference_model, replicas)``.
    """
    table = _shipped_pollux_durations() if durations is None else durations
    jobs = []
    header = ("name", "time", "application", "num_replicas", "batch_size")
    for row in rows(text, header, source=source, error=WorkloadError):
        app = row.text("application")
        replicas, per_node, nodes = gang_from_row(row, "num_replicas", gpus_per_node)
        if app not in POLLUX_JOB_TYPES:
            raise row.fail("application", f"unknown {app!r}; known: {', '.join(POLLUX_JOB_TYPES)}")
        config = (app, replicas, row.integer("batch_size"))
        if config not in table:
            raise row.fail("batch_size", f"no measured duration for {config}")
        job_type = POLLUX_JOB_TYPES[app]
        jobs.append(
            job_from_row(
                row,
                {
                    "job_id": row.text("name"),
                    "arrival_s": row.number("time"),
                    "gpus_per_node": per_node,
                    "nodes": nodes,
                    "job_type": job_type,
                    "work_steps": table[config]
                    * throughputs.steps_per_s(job_type, reference_model, replicas),
                    "namespace": namespace,
                },
            )
        )
    return by_arrival(jobs)


@functools.cache
def _shipped_pollux_durations() -> Mapping[PolluxConfig, float]:
    return read_pollux_durations(shipped_text("pollux", "durations.csv"), source="durations.csv")


def shipped_traces() -> tuple[str, ...]:
    """Names :func:`load_shipped_trace` accepts."""
    return (
        *(f"gavel-{vc}" for vc in GAVEL_VCS),
        "gavel-multi",
        "philly-10k",
        *(f"pollux-workload-{n}" for n in range(1, 9)),
    )


def load_shipped_trace(
    name: str, throughputs: ThroughputTable, seed: int, *, gpus_per_node: int = 8
) -> list[Job]:
    """A shipped trace as jobs on nodes of ``gpus_per_node`` GPUs.

    ``seed`` feeds philly-10k's job-type draws; the other traces do not use it.
    """
    if name not in shipped_traces():
        raise WorkloadError(f"unknown trace {name!r}; shipped: {', '.join(shipped_traces())}")
    if name == "philly-10k":
        text, rng = shipped_text("pollux", "philly.csv.gz"), np.random.default_rng(seed)
        return philly_jobs(
            text,
            throughputs,
            rng,
            gpus_per_node=gpus_per_node,
            start=PHILLY_10K_START,
            limit=PHILLY_10K_JOBS,
            source="philly.csv",
        )
    if name.startswith("pollux-workload-"):
        file = f"workload-{name.rsplit('-', 1)[1]}.csv"
        text = shipped_text("pollux", file)
        return pollux_workload_jobs(text, throughputs, gpus_per_node=gpus_per_node, source=file)
    multi = name == "gavel-multi"
    jobs = []
    for vc in GAVEL_VCS if multi else (name.removeprefix("gavel-"),):
        text = shipped_text("gavel_traces", f"{vc}.trace.gz")
        trace = gavel_trace_jobs(text, vc, gpus_per_node=gpus_per_node, source=f"{vc}.trace")
        jobs += [j for j in trace if not multi or j.arrival_s < GAVEL_MULTI_WINDOW_S]
    return by_arrival(jobs)
