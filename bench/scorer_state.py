"""The scorer's state update without Kafka: GPU-samples per second through what the
worker does per node record (decode, accept, score, decide to emit, encode the node row),
and through the pure step alone (records decoded beforehand), each as a ratio to
decoding the same records alone, measured in the same run.

    .venv/bin/python -m bench.scorer_state [--nodes 50 --rounds 200] [--profile]

Nodes of 8 H100s sampled every 5 s, so the 10-minute window holds 120 samples per GPU
once ``rounds`` passes 120: the steady state of a 100,000-GPU fleet.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import os
import pstats
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import orjson

from bench.scorer_throughput import node_sample
from fairlane_events.codec import encode
from fairlane_events.fast_samples import AnyNodeSample, decode_node_sample
from fairlane_scorer.core.node_rows import NodeWindows, encode_node
from fairlane_scorer.core.step import decode_batch, score_batch
from fairlane_scoring.config import ScoreConfig

INTERVAL_MS = 5_000


def _batches(records: list[bytes], batch: int) -> Iterator[list[AnyNodeSample]]:
    """The records decoded, batch by batch (as ``decode_batch`` gives them)."""
    for first in range(0, len(records), batch):
        chunk = records[first : first + batch]
        yield decode_batch([(orjson.loads(r)["node"].encode(), r) for r in chunk])[0]


def step_all(batches: Iterable[list[AnyNodeSample]], config: ScoreConfig) -> dict[str, NodeWindows]:
    """The pure step: score each batch, encode its changed rows."""
    rows: dict[str, NodeWindows] = {}
    for samples in batches:
        result = score_batch(samples, rows, {}, config)
        for node, row in result.rows.items():
            encode_node(row)
            rows[node] = row
    return rows


def update_all(records: list[bytes], config: ScoreConfig, batch: int) -> dict[str, NodeWindows]:
    """What the worker does per batch: decode, score the batch, encode the changed rows."""
    return step_all(_batches(records, batch), config)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def state_size(records: list[bytes], config: ScoreConfig, batch: int) -> None:
    """RSS and changelog bytes the full windows of these records' GPUs take."""
    before = rss_bytes()
    rows = update_all(records, config, batch)
    grown = rss_bytes() - before
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the allocator keeps from the batches
    live = rss_bytes() - before
    gpus = sum(len(row) for row in rows.values())
    encoded = sum(len(encode_node(row)) for row in rows.values())
    per = 10_000 / gpus
    print(
        f"state of {gpus} GPUs, per 10,000 GPUs: RSS +{grown * per / 2**20:.0f} MiB, "
        f"{live * per / 2**20:.0f} MiB after malloc_trim; "
        f"table rows {encoded * per / 2**20:.0f} MiB per 10,000 GPUs"
    )


def decode_all(records: list[bytes]) -> None:
    for raw in records:
        decode_node_sample(raw)  # as decode_batch does


def seconds(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--rss", action="store_true", help="only: RSS of the full windows")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    records = [
        encode(node_sample("n", n, 1_700_000_000_000 + r * INTERVAL_MS, 8, rng))
        for r in range(args.rounds)
        for n in range(args.nodes)
    ]
    gpu_samples = len(records) * 8
    config = ScoreConfig(interval_s=INTERVAL_MS / 1000)
    if args.rss:
        state_size(records, config, args.batch)
        return
    decode_s = seconds(decode_all, records)
    step_s = seconds(step_all, list(_batches(records, args.batch)), config)
    if args.profile:
        profile = cProfile.Profile()
        update_s = seconds(profile.runcall, update_all, records, config, args.batch)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    else:
        update_s = seconds(update_all, records, config, args.batch)
    print(f"{len(records)} node records x 8 GPUs = {gpu_samples} GPU-samples")
    print(f"decode only:  {gpu_samples / decode_s:,.0f} GPU-samples/s")
    print(
        f"state update: {gpu_samples / update_s:,.0f} GPU-samples/s = "
        f"{decode_s / update_s:.3f} x decode only"
    )
    print(
        f"pure step (decoded records in, rows encoded): {gpu_samples / step_s:,.0f} "
        f"GPU-samples/s = {decode_s / step_s:.3f} x decode only"
    )


if __name__ == "__main__":
    main()
