"""Read this machine's GPUs with the agent's real NVML collector; print what it read.

    .venv/bin/python services/agent/scripts/nvml_table.py [--rounds 3] [--json out.json]

The proof on real hardware that the fake pynvml in tests/fakes cannot give: which of the
twelve metrics each model supports (a value) and which are null (NVML NotSupported),
as a Markdown table for docs/agent.md, plus the raw records as JSON.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from collections import Counter

import pynvml

from fairlane_agent.nvml import NvmlCollector
from fairlane_events.records import GpuSample

METRICS = [f for f in GpuSample.model_fields if f not in ("uuid", "index", "model", "healthy")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()
    errors: Counter[str] = Counter()
    collector = NvmlCollector(pynvml, socket.gethostname(), on_error=lambda k: errors.update([k]))
    records = []
    round_s = []
    try:
        for _ in range(args.rounds):
            started = time.perf_counter()
            records += collector.sample(int(time.time() * 1000))
            round_s.append(time.perf_counter() - started)
            time.sleep(1)
    finally:
        collector.close()
    last = records[-1]
    print(f"driver {last.driver_version}, {len(last.gpus)} GPU(s), NVML errors: {dict(errors)}")
    median_ms = 1000 * statistics.median(round_s)
    print(f"one round read in {median_ms:.0f} ms (median of {len(round_s)})\n")
    print("| GPU | model | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for gpu in last.gpus:
        values = [getattr(gpu, m) for m in METRICS]
        shown = [
            "null" if v is None else f"{v:g}" if isinstance(v, float) else str(v) for v in values
        ]
        print(f"| {gpu.index} | {gpu.model} | " + " | ".join(shown) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.model_dump(mode="json", by_alias=True) for r in records], f, indent=1)


if __name__ == "__main__":
    main()
