"""The jobs a simulation replays, and the documented jobs CSV.

A :class:`Job` is a synchronous gang: ``nodes`` x ``gpus_per_node`` GPUs that advance
together, ``work_steps`` steps of ``job_type`` in all (the throughput table says how many
steps per second a model's GPUs give it). The documented CSV
``job_id,arrival_s,gpus_per_node,nodes,job_type,work_steps[,namespace,priority]`` is what
a user replays (docs/evaluation-formats.md); :mod:`fairlane_eval.core.traces` turns the
public traces into jobs.

Pure: text in, frozen values out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fairlane_eval.core._csv import Row, rows, write_rows
from fairlane_eval.errors import WorkloadError

__all__ = [
    "COLUMNS",
    "MAX_GPUS_PER_NODE",
    "Job",
    "WorkloadError",
    "by_arrival",
    "gang_from_row",
    "job_from_row",
    "read_jobs_csv",
    "split_gang",
    "write_jobs_csv",
]

COLUMNS = (
    "job_id", "arrival_s", "gpus_per_node", "nodes", "job_type", "work_steps",
    "namespace", "priority",
)  # fmt: skip
_REQUIRED = COLUMNS[:6]
MAX_GPUS_PER_NODE = 64


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


def job_from_row(row: Row, values: dict[str, Any]) -> Job:
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


def gang_from_row(row: Row, field: str, gpus_per_node: int) -> tuple[int, int, int]:
    """(GPUs, GPUs per node, nodes) from a row's GPU-count field."""
    gpus = row.integer(field)
    if gpus < 1:
        raise row.fail(field, f"must be >= 1, got {gpus}")
    return gpus, *split_gang(gpus, gpus_per_node)


def by_arrival(jobs: Iterable[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))


def read_jobs_csv(
    text: str, *, source: str = "<jobs csv>", job_types: Collection[str] | None = None
) -> list[Job]:
    """Parse the documented jobs CSV; sorted by arrival then job_id; duplicate ids rejected.

    ``job_types``: the types the throughput table knows; a job of another type then
    fails at its line (else at its first placement, far from the file).
    """
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
        if job_types is not None and values["job_type"] not in job_types:
            known = ", ".join(repr(t) for t in job_types)
            raise row.fail("job_type", f"{values['job_type']!r} has no throughputs; known: {known}")
        jobs.append(job_from_row(row, values))
    return by_arrival(jobs)


def write_jobs_csv(jobs: Iterable[Job]) -> str:
    return write_rows(COLUMNS, (tuple(getattr(j, name) for name in COLUMNS) for j in jobs))
