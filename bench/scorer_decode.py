"""Decoding node samples, per GPU-sample: the pydantic path (``codec.decode``) against
msgspec first (``fast_samples.decode_node_sample``, what the scorer runs), in the same
process, interleaved round by round; alone and with the step's reads of every field
(``component_rows`` and ``health_gates`` over the decoded GPUs).

    .venv/bin/python -m bench.scorer_decode [--records 2000 --rounds 9]

Prints the median (range) of the rounds' CPU time (``time.process_time``) per
GPU-sample: on a shared machine the ratio of the two in the same rounds is what counts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench.scorer_throughput import node_sample
from fairlane_events.codec import decode, encode
from fairlane_events.fast_samples import AnyNodeSample, decode_node_sample
from fairlane_events.records import NodeSample
from fairlane_scorer.core.node_state import NO_ECC
from fairlane_scorer.core.vectors import component_rows, health_gates
from fairlane_scoring.config import ScoreConfig

GPUS = 8


def _pydantic(data: bytes) -> AnyNodeSample:
    return decode(NodeSample, data)


def _read(samples: Sequence[AnyNodeSample]) -> None:
    gpus = [g for s in samples for g in s.gpus]
    component_rows(gpus, ScoreConfig().thermal_margin_c)
    health_gates(gpus, np.full(len(gpus), NO_ECC, dtype=np.int64), NO_ECC)


def _cpu_us(records: list[bytes], decoder: Callable[[bytes], AnyNodeSample], read: bool) -> float:
    t0 = time.process_time()
    samples = [decoder(r) for r in records]
    if read:
        _read(samples)
    return (time.process_time() - t0) / (len(records) * GPUS) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    records = [
        encode(node_sample("n", i, 1_700_000_000_000, GPUS, rng)) for i in range(args.records)
    ]
    cases = {
        (name, read): decoder
        for name, decoder in (("pydantic", _pydantic), ("msgspec first", decode_node_sample))
        for read in (False, True)
    }
    times: dict[tuple[str, bool], list[float]] = {case: [] for case in cases}
    for _ in range(args.rounds):
        for (name, read), decoder in cases.items():
            times[name, read].append(_cpu_us(records, decoder, read))
    print(f"{args.records} records x {GPUS} GPUs, {args.rounds} interleaved rounds")
    for (name, read), values in times.items():
        what = f"{name}{' + reads' if read else ''}"
        print(
            f"{what:24} {statistics.median(values):6.2f} us ({min(values):.2f}-{max(values):.2f})"
        )
    for read in (False, True):
        ratios = [
            f / p
            for f, p in zip(times["msgspec first", read], times["pydantic", read], strict=True)
        ]
        what = "msgspec first / pydantic" + (" (+ reads)" if read else "")
        print(f"ratio {what}: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
