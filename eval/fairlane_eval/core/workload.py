"""The jobs a simulation replays: the documented jobs CSV, converters for the shipped traces.

A :class:`Job` is a synchronous gang: ``nodes`` x ``gpus_per_node`` GPUs that advance
together, ``work_steps`` steps of ``job_type`` in all (the throughput table says how many
steps per second a model's GPUs give it). The documented CSV
``job_id,arrival_s,gpus_per_node,nodes,job_type,work_steps[,namespace,priority]`` is what
a user replays (docs/evaluation-formats.md); the converters turn the public traces into it:

- :func:`gavel_trace_jobs`: Gavel's Philly-derived ``.trace`` files, steps as Gavel gives them;
- :func:`philly_jobs`: Pollux's copy of the Philly job log; a job keeps its traced duration
  on healthy reference GPUs, with a job type drawn from those Gavel measured at its size;
- :func:`pollux_workload_jobs`: Pollux's eight 160-job workloads; a job keeps the duration
  Pollux's own measurements give it at its fixed size on Pollux's T4 testbed.

Pure: text in, frozen values out; randomness is a seeded generator passed in.
"""

from __future__ import annotations

import functools
import gzip
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import numpy as np

from fairlane_eval.core._csv import Row, rows, write_rows
from fairlane_eval.core.throughputs import ThroughputTable, nearest_scale_factor

__all__ = [
    "COLUMNS",
    "GAVEL_MULTI_WINDOW_S",
    "GAVEL_VCS",
    "MAX_GPUS_PER_NODE",
    "PHILLY_10K_JOBS",
    "PHILLY_10K_START",
    "POLLUX_JOB_TYPES",
    "Job",
    "WorkloadError",
    "gavel_trace_jobs",
    "load_shipped_trace",
    "philly_jobs",
    "pollux_workload_jobs",
    "read_jobs_csv",
    "read_pollux_durations",
    "shipped_traces",
    "split_gang",
    "write_jobs_csv",
]

COLUMNS = (
    "job_id", "arrival_s", "gpus_per_node", "nodes", "job_type", "work_steps",
    "namespace", "priority",
)  # fmt: skip
_REQUIRED = COLUMNS[:6]
MAX_GPUS_PER_NODE = 64

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


class WorkloadError(ValueError):
    """A jobs file, trace or job that cannot be used; the message says where and which field."""


def _problem(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first invalid field of a job's values and what is wrong with it, or None."""
    arrival, work = job["arrival_s"], job["work_steps"]
    per_node, nodes = job["gpus_per_node"], job["nodes"]
    checks = (
        ("job_id", bool(job["job_id"]), "must be non-empty"),
        ("arrival_s", math.isfinite(arrival) and arrival >= 0, f"must be >= 0, got {arrival}"),
        ("gpus_per_node", 1 <= per_node <= MAX_GPUS_PER_NODE, f"must be 1..64, got {per_node}"),
        ("nodes", nodes >= 1, f"must be >= 1, got {nodes}"),
        ("job_type", bool(job["job_type"]), "must be non-empty"),
        ("work_steps", math.isfinite(work) and work > 0, f"must be > 0, got {work}"),
        ("namespace", bool(job["namespace"]), "must be non-empty"),
    )
    return next(((name, why) for name, ok, why in checks if not ok), None)


@dataclass(frozen=True)
class Job:
    """A synchronous gang job: all its GPUs step together, at the pace of the slowest."""

    job_id: str
    arrival_s: float
    gpus_per_node: int
    nodes: int
    job_type: str
    work_steps: float
    namespace: str = "default"
    priority: int = 0

    def __post_init__(self) -> None:
        problem = _problem(vars(self))
        if problem is not None:
            raise WorkloadError(f"job {self.job_id!r}: {problem[0]}: {problem[1]}")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def _job(row: Row, values: dict[str, Any]) -> Job:
    """A job from a parsed row; an invalid value fails naming the row's line and the field."""
    problem = _problem({"namespace": "default", **values})
    if problem is not None:
        raise row.fail(*problem)
    return Job(**values)


def split_gang(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(GPUs per node, nodes) for a ``gpus``-GPU job on nodes of ``gpus_per_node``.

    The fewest nodes that split the job evenly with at most ``gpus_per_node`` each, so the
    job keeps its GPU count: 8 -> (8, 1), 12 -> (6, 2), 20 -> (5, 4), 64 -> (8, 8).
    """
    if gpus < 1 or gpus_per_node < 1:
        raise WorkloadError(f"cannot split {gpus} GPUs onto nodes of {gpus_per_node}")
    nodes = next(n for n in range(math.ceil(gpus / gpus_per_node), gpus + 1) if gpus % n == 0)
    return gpus // nodes, nodes


def _gang(row: Row, field: str, gpus_per_node: int) -> tuple[int, int, int]:
    """(GPUs, GPUs per node, nodes) from a row's GPU-count field."""
    gpus = row.integer(field)
    if gpus < 1:
        raise row.fail(field, f"must be >= 1, got {gpus}")
    return gpus, *split_gang(gpus, gpus_per_node)


def _sorted(jobs: Iterable[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))


def read_jobs_csv(text: str, *, source: str = "<jobs csv>") -> list[Job]:
    """Parse the documented jobs CSV; sorted by arrival then job_id; duplicate ids rejected."""
    jobs: list[Job] = []
    lines: dict[str, int] = {}
    for row in rows(text, _REQUIRED, source=source, error=WorkloadError):
        job_id = row.text("job_id")
        if job_id in lines:
            raise row.fail("job_id", f"{job_id!r} repeats line {lines[job_id]}")
        lines[job_id] = row.line
        values = {
            "job_id": job_id,
            "arrival_s": row.number("arrival_s"),
            "gpus_per_node": row.integer("gpus_per_node"),
            "nodes": row.integer("nodes"),
            "job_type": row.text("job_type"),
            "work_steps": row.number("work_steps"),
            "namespace": row.text("namespace", "default"),
            "priority": row.integer("priority", 0),
        }
        jobs.append(_job(row, values))
    return _sorted(jobs)


def write_jobs_csv(jobs: Iterable[Job]) -> str:
    return write_rows(COLUMNS, (tuple(getattr(j, name) for name in COLUMNS) for j in jobs))


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
        _, per_node, nodes = _gang(row, "scale_factor", gpus_per_node)
        jobs.append(
            _job(
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
    return _sorted(jobs)


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
        gpus, per_node, nodes = _gang(row, "num_gpus", gpus_per_node)
        if gpus not in candidates:
            candidates[gpus] = _types_at(throughputs, gpus, reference_model)
        types = candidates[gpus]
        job_type = types[int(draw * len(types))]
        rate = throughputs.steps_per_s(job_type, reference_model, gpus)
        jobs.append(
            _job(
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
    return _sorted(jobs)


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
        replicas, per_node, nodes = _gang(row, "num_replicas", gpus_per_node)
        if app not in POLLUX_JOB_TYPES:
            raise row.fail("application", f"unknown {app!r}; known: {', '.join(POLLUX_JOB_TYPES)}")
        config = (app, replicas, row.integer("batch_size"))
        if config not in table:
            raise row.fail("batch_size", f"no measured duration for {config}")
        job_type = POLLUX_JOB_TYPES[app]
        jobs.append(
            _job(
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
    return _sorted(jobs)


def _data_text(*parts: str) -> str:
    resource = resources.files("fairlane_eval").joinpath("data", *parts)
    if parts[-1].endswith(".gz"):
        return gzip.decompress(resource.read_bytes()).decode()
    return resource.read_text()


@functools.cache
def _shipped_pollux_durations() -> Mapping[PolluxConfig, float]:
    return read_pollux_durations(_data_text("pollux", "durations.csv"), source="durations.csv")


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
        text, rng = _data_text("pollux", "philly.csv.gz"), np.random.default_rng(seed)
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
        text = _data_text("pollux", file)
        return pollux_workload_jobs(text, throughputs, gpus_per_node=gpus_per_node, source=file)
    multi = name == "gavel-multi"
    jobs = []
    for vc in GAVEL_VCS if multi else (name.removeprefix("gavel-"),):
        text = _data_text("gavel_traces", f"{vc}.trace.gz")
        trace = gavel_trace_jobs(text, vc, gpus_per_node=gpus_per_node, source=f"{vc}.trace")
        jobs += [j for j in trace if not multi or j.arrival_s < GAVEL_MULTI_WINDOW_S]
    return _sorted(jobs)
