"""Derive the simulator's per-GPU speed table from PAL's ResNet-50 measurements.

    python libs/sim/scripts/derive_pal_speeds.py PATH/resnet-longhorn-agg.csv \
        > libs/sim/fairlane_sim/data/pal_resnet50_v100_speed.csv

Input: hal-uw/blox-pal @ da726cab : aggregated_data/sim/resnet-longhorn-agg.csv (MIT),
one row per (run, GPU) on TACC Longhorn's V100s with ``perf`` = mean iteration time.
Output: one row per GPU: its median iteration time over runs and its speed relative to
the fleet's median GPU (median time / this GPU's time; 1.05 = 5 % faster).
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict


def main(path: str) -> None:
    times: dict[str, list[float]] = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            times[row["uuid"]].append(float(row["perf"]))
    per_gpu = {gpu: statistics.median(t) for gpu, t in times.items()}
    fleet_median = statistics.median(per_gpu.values())
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["gpu", "runs", "median_iter_time", "relative_speed"])
    for gpu in sorted(per_gpu):
        t = per_gpu[gpu]
        out.writerow([gpu, len(times[gpu]), f"{t:.4f}", f"{fleet_median / t:.5f}"])


if __name__ == "__main__":
    main(sys.argv[1])
