"""Flatten Gavel's measured throughputs into the evaluation's throughput CSV.

    .venv/bin/python eval/scripts/derive_gavel_throughputs.py \
        PATH/simulation_throughputs.json > eval/fairlane_eval/data/gavel_throughputs.csv

Input: stanford-futuredata/gavel @ c4fa4009 : scheduler/simulation_throughputs.json (MIT).
Output: one row per (job type, GPU model, scale factor) with the isolated steps/s of the
whole job (see ``fairlane_eval.core.throughputs.gavel_throughputs``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fairlane_eval.core.throughputs import gavel_throughputs, write_throughputs_csv


def main(path: str) -> None:
    sys.stdout.write(write_throughputs_csv(gavel_throughputs(Path(path).read_text())))


if __name__ == "__main__":
    main(sys.argv[1])
