"""Scores on the topic against the reference (libs/scoring) over the samples on the topic.

Only GPUs the load never places on (the fleet's V100 nodes, see stack.MODELS) are
compared: with no allocation their score is the reference of their samples alone, so
the check needs no view of when the scorer learnt of a placement.
"""

from __future__ import annotations

import bisect
import collections
import math

from fairlane_events.codec import decode
from fairlane_events.records import GpuSample, GpuScore, NodeSample
from fairlane_events.topics import GPU_SCORES, NODE_SAMPLES
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import scored_history, summarise
from tests.chaos.audit import read_topic
from tests.chaos.stack import UNPLACED_MODEL, ChaosStack

__all__ = ["score_parity"]


def _config(stack: ChaosStack) -> ScoreConfig:
    scorer = stack.services["scorer"]
    return ScoreConfig(
        interval_s=stack.interval_s, heartbeat_s=float(scorer.env["FAIRLANE_HEARTBEAT_S"])
    )


async def score_parity(stack: ChaosStack, since_ms: int) -> tuple[int, list[str]]:
    """How many non-stale score records with ``ts_ms >= since_ms`` of unplaced GPUs were
    checked, and a line per record that differs from the reference.

    The scores are read first: a score exists only once the scorer has read its sample,
    so the samples read afterwards hold every sample behind every score read. Read the
    other way round, a round of samples produced between the two reads has its scores
    checked against a reference without it (one sample fewer in the window, for every
    GPU that emitted in that round: the "34 samples where the reference has 33" of
    docs/reliability.md)."""
    scores = await read_topic(stack.bootstrap, GPU_SCORES)
    history: dict[str, list[tuple[int, GpuSample]]] = collections.defaultdict(list)
    for record in await read_topic(stack.bootstrap, NODE_SAMPLES):
        if record.key is None or not record.key.startswith(stack.prefix.encode()):
            continue
        sample = decode(NodeSample, record.value)
        for gpu in sample.gpus:
            if UNPLACED_MODEL in gpu.model:  # NVML's name, e.g. Tesla V100-SXM2-32GB
                history[gpu.uuid].append((sample.ts_ms, gpu))
    config = _config(stack)
    scored = {uuid: scored_history(h, config) for uuid, h in history.items()}
    stamps = {uuid: [s.ts_ms for s in rows] for uuid, rows in scored.items()}
    checked, wrong = 0, []
    for record in scores:
        if record.key is None or record.key.decode(errors="replace") not in scored:
            continue  # another GPU, or a hostile record
        score = decode(GpuScore, record.value)
        if score.stale or score.ts_ms < since_ms:
            continue
        upto = bisect.bisect_right(stamps[score.uuid], score.ts_ms)
        if upto == 0 or stamps[score.uuid][upto - 1] != score.ts_ms:
            wrong.append(f"{score.uuid}@{score.ts_ms}: no sample of that time on the topic")
            continue
        want = summarise(scored[score.uuid][:upto], score.ts_ms, -math.inf, config)  # never held
        checked += 1
        if not math.isclose(score.score, want.score, abs_tol=1e-9):
            wrong.append(
                f"{score.node}/{score.uuid}@{score.ts_ms}: {score.score} != {want.score} "
                f"({score.samples_in_window} samples in the window, reference "
                f"{want.samples_in_window})"
            )
    return checked, wrong
