"""How well the SM clock predicts a V100's speed: the numbers behind docs/scoring.md.

Data: PAL's aggregated Longhorn V100 runs (hal-uw/blox-pal @ da726cab,
aggregated_data/sim/sgemm-longhorn-agg.csv, MIT licence), not shipped with Fairlane.

    .venv/bin/python bench/pal_clock_speed.py [path/to/sgemm-longhorn-agg.csv]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

DEFAULT = (
    Path(__file__).resolve().parents[2] / "shared/data/pal_longhorn_v100/sgemm-longhorn-agg.csv"
)
V100_MAX_SM_MHZ = 1530.0


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    with path.open() as f:
        rows = list(csv.DictReader(f))
    kernel_ms = np.array([float(r["perf"]) for r in rows])
    clock = np.array([float(r["freq"]) for r in rows]) / V100_MAX_SM_MHZ
    temp_c = np.array([float(r["temp"]) for r in rows])
    speed = np.median(kernel_ms) / kernel_ms
    slope, intercept = np.polyfit(clock, speed, 1)
    residual = speed - (slope * clock + intercept)
    print(f"runs {len(rows)}: speed = {slope:.2f} x clock ratio + {intercept:.2f}")
    print(f"r(clock, speed) = {np.corrcoef(clock, speed)[0, 1]:.2f}")
    print(f"r(temp, speed) = {np.corrcoef(temp_c, speed)[0, 1]:.2f}")
    print(f"r(temp, residual after clock) = {np.corrcoef(temp_c, residual)[0, 1]:.2f}")
    print("clock ratio | runs | median speed | median clock / fleet median")
    for low in np.arange(0.84, 0.94, 0.02):
        inside = (clock >= low) & (clock < low + 0.02)
        if inside.any():
            rel = np.median(clock[inside]) / np.median(clock)
            band = f"{low:.2f}-{low + 0.02:.2f}"
            print(f"{band} | {inside.sum()} | {np.median(speed[inside]):.3f} | {rel:.3f}")


if __name__ == "__main__":
    main()
