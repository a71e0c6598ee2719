"""The scorer's state update without Kafka: GPU-samples per second through what the
worker does per node record (decode, accept, score, decide to emit, encode the node row),
as a ratio to decoding the same records alone, measured in the same run.

    .venv/bin/python -m bench.scorer_state [--nodes 50 --rounds 200] [--profile]

Nodes of 8 H100s sampled every 5 s, so the 10-minute window holds 120 samples per GPU
once ``rounds`` passes 120: the steady state of a 100,000-GPU fleet.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import time
from collections.abc import Callable

import numpy as np

from bench.scorer_throughput import node_sample
from fairlane_events.codec import decode, encode
from fairlane_events.records import NodeSample
from fairlane_scorer.core.node_rows import NodeWindows, encode_node
from fairlane_scorer.core.window import accept_sample, mark_emitted, score_window, should_emit
from fairlane_scoring.config import ScoreConfig

INTERVAL_MS = 5_000
NEVER = -math.inf  # never allocated: every load component counts


def update_all(records: list[bytes], config: ScoreConfig) -> None:
    rows: dict[str, NodeWindows] = {}
    for raw in records:
        sample = decode(NodeSample, raw)
        current = dict(rows.get(sample.node, {}))
        for gpu in sample.gpus:
            window = accept_sample(
                current.get(gpu.uuid),
                sample.node,
                sample.ts_ms,
                gpu,
                load_since_ms=NEVER,
                config=config,
            )
            if window is None:
                continue
            result = score_window(window, sample.ts_ms, NEVER, config)
            if should_emit(window, result, sample.ts_ms, config):
                window = mark_emitted(window, result, sample.ts_ms)
            current[gpu.uuid] = window
        encode_node(current)
        rows[sample.node] = current


def decode_all(records: list[bytes]) -> None:
    for raw in records:
        decode(NodeSample, raw)


def seconds(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    records = [
        encode(node_sample("n", n, 1_700_000_000_000 + r * INTERVAL_MS, 8, rng))
        for r in range(args.rounds)
        for n in range(args.nodes)
    ]
    gpu_samples = len(records) * 8
    config = ScoreConfig(interval_s=INTERVAL_MS / 1000)
    decode_s = seconds(decode_all, records)
    if args.profile:
        profile = cProfile.Profile()
        update_s = seconds(profile.runcall, update_all, records, config)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(20)
    else:
        update_s = seconds(update_all, records, config)
    print(f"{len(records)} node records x 8 GPUs = {gpu_samples} GPU-samples")
    print(f"decode only:  {gpu_samples / decode_s:,.0f} GPU-samples/s")
    print(
        f"state update: {gpu_samples / update_s:,.0f} GPU-samples/s = "
        f"{decode_s / update_s:.3f} x decode only"
    )


if __name__ == "__main__":
    main()
