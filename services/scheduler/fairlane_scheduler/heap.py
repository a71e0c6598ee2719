"""The garbage collector and the scheduler's long-lived state.

The fleet view, its rankings and the ledger live as long as the process, and every
full (gen-2) collection of CPython's cyclic collector walks all of them again, however
little changed: ~100 ms a collection at 100k GPUs. As production Python services
do, what startup built is frozen (``gc.freeze()``: a permanent generation that no
collection walks), and the youngest generation's threshold is raised, so that the
requests in flight (16 clients' futures, bodies, rows) are walked and promoted less
often. Measured in the placement benchmark (docs/benchmarks-history.md, Scheduler): the
collector's time per place + release pair at 10k / 100k GPUs 0.10 / 0.13 ms, frozen
0.09 / 0.08, frozen with a threshold of 10,000 0.03 / 0.04.
"""

from __future__ import annotations

import asyncio
import gc
import logging

__all__ = ["freeze_after_catch_up", "thaw"]

log = logging.getLogger("fairlane.scheduler")


async def freeze_after_catch_up(caught_up: asyncio.Event, gen0_threshold: int) -> None:
    """Once ``caught_up`` is set: collect what startup left as garbage, freeze the rest
    and set the youngest generation's threshold (the older ones keep theirs)."""
    await caught_up.wait()
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0_threshold, *gc.get_threshold()[1:])
    log.info("froze %d objects out of the garbage collector's walks", gc.get_freeze_count())


def thaw(thresholds: tuple[int, int, int]) -> None:
    """At shutdown: what was frozen is walked again, so that a stopped app's cycles are
    freed (tests and benchmarks start many apps in one process); the thresholds back as
    this app found them (apps whose lives overlap in one process: each restores its own)."""
    gc.unfreeze()
    gc.set_threshold(*thresholds)
