"""Derive the simulator's per-GPU, per-job-class speed table from PAL's Longhorn data.

    python libs/sim/scripts/derive_pal_class_speeds.py PAL_DIR \
        > libs/sim/fairlane_sim/data/pal_longhorn_class_speeds.csv

PAL_DIR holds hal-uw/blox-pal @ da726cab : aggregated_data/sim/*-longhorn-agg.csv (MIT;
"Not All GPUs Are Created Equal", Sinha et al., SC22; PAL, SC24): one row per (run, GPU)
of four applications on TACC Longhorn's V100s (4 per node). Every ``perf`` is a time,
lower is faster:

- resnet50 (``resnet-longhorn-agg.csv``): iteration time; ``uuid`` is the
  cabinet-node-device key (``c002-4-1``).
- bert (``bert-longhorn-agg.csv``): iteration time in ms (``perf_s`` is the same in
  seconds); same key. Runs flagged ``warmup`` (each GPU's first one or two) are dropped.
- pagerank (``pagerank-longhorn-agg.csv``): ms for the 2,000-kernel run; ``uuid`` is the
  NVML GPU UUID, the key is ``cabinet``-``node`` (zero-padded there)-``device``.
- sgemm (``sgemm-longhorn-agg.csv``): ms per kernel, one configuration throughout
  (25536², volta_sgemm_128x32_sliced1x4_nn; checked): ``perf`` equals the kernel start
  spacing and falls as the SM clock rises (r = -0.93), so it is a time, not GFLOP/s.
  Its rows carry no device slot, so a GPU is placed through pagerank's GPU UUID ->
  cabinet-node-device map (168 of 392 GPUs; where sgemm names the node too, the two
  agree). Measured in 2020, the other three in 2022.

Output: one row per GPU measured under any class (key cabinet-node-device), its node
(cabinet-node) and per class its relative speed (the class's median GPU's time / this
GPU's time, each GPU's time the median over its runs; empty when not measured) and run
count. The class median is over the GPUs in this table. Written to stdout; stderr gets
each class's split-half reliability (Pearson and Spearman r between GPUs' median time
over odd and over even runs in time order): how much of the spread is the GPU's own
rather than the run's.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

CLASSES = ("resnet50", "bert", "pagerank", "sgemm")
SGEMM_CONFIG = ("25536", "volta_sgemm_128x32_sliced1x4_nn", "100")

Runs = dict[str, list[tuple[int, float]]]  # GPU key -> [(ts, time)]


def _rows(pal_dir: Path, app: str) -> Iterator[dict[str, str]]:
    with (pal_dir / f"{app}-longhorn-agg.csv").open(newline="") as f:
        yield from csv.DictReader(f)


def _key(row: dict[str, str]) -> str:
    return f"{row['cabinet']}-{int(row['node'])}-{row['device']}"


def read_runs(pal_dir: Path) -> dict[str, Runs]:
    runs: dict[str, Runs] = {c: defaultdict(list) for c in CLASSES}
    for row in _rows(pal_dir, "resnet"):
        runs["resnet50"][row["uuid"]].append((int(row["ts"]), float(row["perf"])))
    for row in _rows(pal_dir, "bert"):
        if row["warmup"] == "FALSE":
            runs["bert"][row["uuid"]].append((int(row["ts"]), float(row["perf"])))
    slot: dict[str, str] = {}
    for row in _rows(pal_dir, "pagerank"):
        slot[row["uuid"]] = _key(row)
        runs["pagerank"][_key(row)].append((int(row["ts"]), float(row["perf"])))
    for row in _rows(pal_dir, "sgemm"):
        if (row["input_size"], row["kern"], row["reps"]) != SGEMM_CONFIG:
            raise SystemExit(f"sgemm: a second configuration {row['input_size']} {row['kern']}")
        if row["uuid"] in slot:
            runs["sgemm"][slot[row["uuid"]]].append((int(row["ts"]), float(row["perf"])))
    return runs


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


def split_half(runs: Runs) -> tuple[float, float]:
    """Pearson and Spearman r of GPUs' median time over odd vs even runs (time order)."""
    halves = [sorted(r) for r in runs.values() if len(r) >= 2]
    odd = [statistics.median(t for _, t in r[0::2]) for r in halves]
    even = [statistics.median(t for _, t in r[1::2]) for r in halves]
    return statistics.correlation(odd, even), statistics.correlation(_ranks(odd), _ranks(even))


def _order(gpu: str) -> tuple[str, int, int]:
    cabinet, node, device = gpu.split("-")
    return cabinet, int(node), int(device)


def main(pal_dir: Path) -> None:
    runs = read_runs(pal_dir)
    speeds: dict[str, dict[str, float]] = {}
    for c in CLASSES:
        times = {gpu: statistics.median(t for _, t in r) for gpu, r in runs[c].items()}
        median = statistics.median(times.values())
        speeds[c] = {gpu: median / t for gpu, t in times.items()}
        pearson, spearman = split_half(runs[c])
        print(
            f"{c}: {len(times)} GPUs, split-half r = {pearson:.3f} (Spearman {spearman:.3f})",
            file=sys.stderr,
        )
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["gpu", "node", *(f"{c}_{col}" for c in CLASSES for col in ("speed", "runs"))])
    for gpu in sorted({gpu for s in speeds.values() for gpu in s}, key=_order):
        row = [gpu, gpu.rsplit("-", 1)[0]]
        for c in CLASSES:
            speed = speeds[c].get(gpu)
            row += ["", "0"] if speed is None else [f"{speed:.5f}", str(len(runs[c][gpu]))]
        out.writerow(row)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
