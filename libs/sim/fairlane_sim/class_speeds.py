"""Per-GPU speeds per job class, drawn jointly from PAL's four-application measurements.

A GPU's speed is not one number: it depends on the kind of job. The table
(``data/pal_longhorn_class_speeds.csv``; provenance in ``data/README.md``) holds, for 384
V100s on 96 four-GPU nodes of TACC Longhorn, each GPU's relative speed under ResNet-50,
BERT, PageRank and SGEMM where measured (the class's median GPU's time / this GPU's
time; 1.0 = that median GPU, 0.9 = 11 % more time).

Sampling (:func:`sample_class_fleet`). A simulated node is a measured node drawn
uniformly, with replacement, among those measured under at least one requested class;
its GPUs keep their measured vectors, so what a node's GPUs share (host, cooling, the
hour they were measured) stays together. A simulated node with fewer GPUs than the
measured one (4) takes a random subset; one with more is filled from further drawn
nodes, each used whole before the next is drawn.

Imputation. Each class was measured on whole nodes (resnet50 84, bert 34, pagerank 43,
sgemm 42 of the 96), so a drawn node lacks a class on all its GPUs. The lacking values
come from a node-level hot deck: a donor node drawn at random among those measured under
that class, GPU i taking the donor's GPU i, a fresh donor per class and drawn node. Why:
every value is a measured one and every measured node is equally likely, so each class's
marginal is exactly the measured one; the donor's node structure comes along (BERT's
spread lies almost wholly between nodes, which a per-GPU draw would erase); and the
imputed class is independent of the node's measured ones, which is what the data show
(Spearman's rho between classes on GPUs measured under both: -0.09 to 0.17). A rank
copula at the GPU's measured quantile would force rho = 1, a nearest-GPU donor would
copy a neighbour's noise; both invent a dependence the measurements do not show.

Caveat: only SGEMM's and PageRank's per-GPU speeds repeat from run to run (split-half
r 1.00 and 0.99); ResNet-50's and BERT's medians are mostly run-to-run noise (0.19 and
-0.15), and their between-node share is largely the conditions a node's four GPUs shared
while measured together. The sampler reproduces the measured table, not a noise-free one.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import combinations

import numpy as np
import numpy.typing as npt

__all__ = [
    "CLASSES",
    "ClassSpeedSummary",
    "ClassStats",
    "GpuClassSpeeds",
    "RankCorrelation",
    "SampledFleet",
    "between_node_share",
    "measured_class_speeds",
    "read_class_speeds",
    "sample_class_fleet",
    "sample_class_speeds",
    "spearman_rho",
    "summarize_class_speeds",
]

#: The job classes measured, in the table's column order.
CLASSES: tuple[str, ...] = ("resnet50", "bert", "pagerank", "sgemm")

_DATA = "pal_longhorn_class_speeds.csv"
_SLOWER = 1.05  # "slower": more than 5 % above the median GPU's time

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GpuClassSpeeds:
    """One measured GPU: ``speeds`` and ``runs`` per :data:`CLASSES` (None / 0: not measured)."""

    gpu: str  # cabinet-node-device, e.g. "c002-4-1"
    node: str  # cabinet-node, e.g. "c002-4"
    speeds: tuple[float | None, ...]
    runs: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class SampledFleet:
    """A drawn fleet: row ``i`` is simulated GPU ``i`` (node ``i // gpus_per_node``)."""

    classes: tuple[str, ...]
    speeds: FloatArray  # (GPUs, classes) relative speeds, never NaN
    source_gpus: tuple[str, ...]  # the measured GPU each row is
    imputed: npt.NDArray[np.bool_]  # (GPUs, classes): True where a donor node's value


@dataclass(frozen=True)
class ClassStats:
    job_class: str
    gpus: int
    slower_5pct_share: float  # share of GPUs taking > 5 % more time than the median GPU
    worst_speed: float
    between_node_share: float  # see :func:`between_node_share`


@dataclass(frozen=True)
class RankCorrelation:
    class_a: str
    class_b: str
    gpus: int  # GPUs measured under both
    spearman: float


@dataclass(frozen=True)
class ClassSpeedSummary:
    per_class: tuple[ClassStats, ...]
    rank_correlations: tuple[RankCorrelation, ...]


def read_class_speeds(text: str) -> tuple[GpuClassSpeeds, ...]:
    """Parse the table's CSV text (columns ``gpu``, ``node``, ``<class>_speed``/``_runs``)."""
    return tuple(
        GpuClassSpeeds(
            gpu=row["gpu"],
            node=row["node"],
            speeds=tuple(float(s) if (s := row[f"{c}_speed"]) else None for c in CLASSES),
            runs=tuple(int(row[f"{c}_runs"]) for c in CLASSES),
        )
        for row in csv.DictReader(io.StringIO(text))
    )


@functools.cache
def measured_class_speeds() -> tuple[GpuClassSpeeds, ...]:
    """The shipped table, one entry per GPU, grouped by node."""
    text = resources.files("fairlane_sim").joinpath("data", _DATA).read_text()
    return read_class_speeds(text)


@functools.cache
def _measured_nodes() -> tuple[tuple[tuple[str, ...], FloatArray], ...]:
    """Per measured node: its GPUs and their (GPUs, CLASSES) speeds, NaN where unmeasured."""
    by_node: dict[str, list[GpuClassSpeeds]] = {}
    for gpu in measured_class_speeds():
        by_node.setdefault(gpu.node, []).append(gpu)
    return tuple(
        (
            tuple(g.gpu for g in gpus),
            np.array([[np.nan if s is None else s for s in g.speeds] for g in gpus]),
        )
        for gpus in by_node.values()
    )


def sample_class_fleet(
    rng: np.random.Generator,
    nodes: int,
    gpus_per_node: int,
    classes: Sequence[str] = CLASSES,
) -> SampledFleet:
    """Draw ``nodes * gpus_per_node`` GPUs' speeds under ``classes`` jointly (see module)."""
    unknown = [c for c in classes if c not in CLASSES]
    if unknown or not classes:
        raise ValueError(f"classes must be some of {CLASSES}, unknown: {unknown}")
    if nodes < 0 or gpus_per_node < 1:
        raise ValueError("need nodes >= 0 and gpus_per_node >= 1")
    cols = [CLASSES.index(c) for c in classes]
    measured = _measured_nodes()
    eligible = [n for n in measured if not np.isnan(n[1][:, cols]).all()]
    donors = [[n[1][:, c] for n in measured if not np.isnan(n[1][:, c]).any()] for c in cols]
    speeds: list[FloatArray] = []
    imputed: list[npt.NDArray[np.bool_]] = []
    sources: list[str] = []
    for _ in range(nodes):
        need = gpus_per_node
        while need:
            gpus, table = eligible[rng.integers(len(eligible))]
            block = table[:, cols]  # a copy: fancy indexing
            missing = np.isnan(block)
            for j in np.flatnonzero(missing.any(axis=0)):
                donor = donors[j][rng.integers(len(donors[j]))]
                slots = np.arange(len(gpus)) % len(donor)
                block[:, j] = np.where(missing[:, j], donor[slots], block[:, j])
            take = rng.permutation(len(gpus))[:need]
            speeds.append(block[take])
            imputed.append(missing[take])
            sources.extend(gpus[i] for i in take)
            need -= len(take)
    width = len(cols)
    return SampledFleet(
        classes=tuple(classes),
        speeds=np.concatenate(speeds) if speeds else np.empty((0, width)),
        source_gpus=tuple(sources),
        imputed=np.concatenate(imputed) if imputed else np.empty((0, width), dtype=bool),
    )


def sample_class_speeds(
    rng: np.random.Generator,
    nodes: int,
    gpus_per_node: int,
    classes: Sequence[str] = CLASSES,
) -> FloatArray:
    """(``nodes * gpus_per_node``, ``len(classes)``) relative speeds; :func:`sample_class_fleet`."""
    return sample_class_fleet(rng, nodes, gpus_per_node, classes).speeds


def spearman_rho(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks, ties sharing their mean rank."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1 or len(xs) < 2:
        raise ValueError("need two sequences of equal length >= 2")
    rx, ry = _ranks(xs), _ranks(ys)
    if rx.std() == 0 or ry.std() == 0:
        raise ValueError("a constant sequence has no rank correlation")
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: FloatArray) -> FloatArray:
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    mean_rank = np.cumsum(counts) - (counts - 1) / 2  # 1-based mean rank of each value
    ranks: FloatArray = mean_rank[inverse]
    return ranks


def between_node_share(values: npt.ArrayLike, nodes: Sequence[str]) -> float:
    """Share of the variance that lies between nodes: one-way random-effects ANOVA, ICC(1).

    With k nodes, N GPUs, node sizes n_i and means m_i, grand mean m:
    MSB = sum n_i (m_i - m)^2 / (k - 1), MSW = sum (x - m_i)^2 / (N - k),
    n0 = (N - sum n_i^2 / N) / (k - 1), s_b^2 = max(0, (MSB - MSW) / n0),
    share = s_b^2 / (s_b^2 + MSW). Unlike the raw SSB / SST it is ~0 when nodes do not
    matter (SSB / SST is then about (k - 1) / (N - 1), chance alone).
    """
    x = np.asarray(values, dtype=float)
    keys, group = np.unique(np.asarray(nodes), return_inverse=True)
    k, n = len(keys), len(x)
    if len(nodes) != n or k < 2 or n <= k:
        raise ValueError("need two nodes or more and more GPUs than nodes")
    sizes = np.bincount(group)
    means = np.bincount(group, weights=x) / sizes
    msb = float(sizes @ (means - x.mean()) ** 2) / (k - 1)
    msw = float(((x - means[group]) ** 2).sum()) / (n - k)
    n0 = (n - float(sizes @ sizes) / n) / (k - 1)
    s_b2 = max(0.0, (msb - msw) / n0)
    return s_b2 / (s_b2 + msw) if s_b2 + msw > 0 else 0.0


def summarize_class_speeds(
    table: Sequence[GpuClassSpeeds] | None = None,
) -> ClassSpeedSummary:
    """Per class and per class pair, the numbers the docs quote (default: the shipped table)."""
    gpus = measured_class_speeds() if table is None else table
    per_class = []
    for i, c in enumerate(CLASSES):
        measured = [(g.speeds[i], g.node) for g in gpus if g.speeds[i] is not None]
        speeds = np.array([s for s, _ in measured], dtype=float)
        per_class.append(
            ClassStats(
                job_class=c,
                gpus=len(speeds),
                slower_5pct_share=float(np.mean(speeds * _SLOWER < 1.0)),
                worst_speed=float(speeds.min()),
                between_node_share=between_node_share(speeds, [n for _, n in measured]),
            )
        )
    correlations = []
    for (i, a), (j, b) in combinations(enumerate(CLASSES), 2):
        pairs = [(g.speeds[i], g.speeds[j]) for g in gpus]
        both = [(x, y) for x, y in pairs if x is not None and y is not None]
        rho = spearman_rho([x for x, _ in both], [y for _, y in both])
        correlations.append(RankCorrelation(a, b, len(both), rho))
    return ClassSpeedSummary(tuple(per_class), tuple(correlations))
