"""A small numpy "training" job for tests and simulated fleets: ``python -m fairlane.demo``.

One thread per GPU of the node (``FAIRLANE_GPU_UUIDS``), each a rank: a little numpy
work, then a sleep of ``base_s / speed`` where ``speed`` is the GPU's hidden speed from
the JSON file named by ``FAIRLANE_DEMO_SPEEDS`` (``{uuid: speed}`` or ``{uuid: {class:
speed}}``, the class being ``FAIRLANE_JOB_CLASS`` and ``"*"`` any other, as the simulated
agent's ``--hidden-speeds-file`` writes it; 1.0 when absent). That section is
timed with :meth:`fairlane.progress.Reporter.step`; then the ranks wait for each other
(a barrier: the collective, outside the timed section), as a synchronous job does.

It stops after ``--steps`` steps (0: until SIGTERM/SIGINT). On SIGUSR1 it prints the
slow GPUs of the degraded event (``FAIRLANE_DEGRADED_FILE``) and, with
``--exit-on-degraded``, stops as if it had checkpointed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

import numpy as np

from fairlane.degraded import read_slow_gpus
from fairlane.env import GPU_UUIDS, JOB_CLASS
from fairlane.progress import Reporter

__all__ = ["hidden_speed", "main"]

SPEEDS = "FAIRLANE_DEMO_SPEEDS"
#: The key of every class a GPU's entry does not name (fairlane_sim's ANY_CLASS).
ANY_CLASS = "*"


def hidden_speed(speeds: Mapping[str, object], uuid: str, job_class: str) -> float:
    """The GPU's speed under ``job_class`` from the speeds file's content (1.0 if absent)."""
    entry = speeds.get(uuid, 1.0)
    if isinstance(entry, Mapping):
        entry = entry.get(job_class, entry.get(ANY_CLASS, 1.0))
    if not isinstance(entry, int | float) or entry <= 0:
        raise ValueError(f"{SPEEDS}: speed of {uuid} must be a positive number")
    return float(entry)


def _rank(
    reporter: Reporter,
    compute_s: float,
    steps: int,
    barrier: threading.Barrier,
    stop: threading.Event,
) -> None:
    rng = np.random.default_rng()
    done = 0
    while not stop.is_set() and (steps == 0 or done < steps):
        with reporter.step():
            a = rng.standard_normal((32, 32))
            (a @ a.T).sum()
            time.sleep(compute_s)
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        done += 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fairlane.demo")
    parser.add_argument("--steps", type=int, default=100, help="0: until signalled")
    parser.add_argument("--base-s", type=float, default=0.05, help="a step at speed 1")
    parser.add_argument("--exit-on-degraded", action="store_true")
    args = parser.parse_args(argv)
    uuids = [u for u in os.environ.get(GPU_UUIDS, "").split(",") if u] or ["GPU-local"]
    speeds_file = os.environ.get(SPEEDS)
    speeds = json.loads(Path(speeds_file).read_text()) if speeds_file else {}
    job_class = os.environ.get(JOB_CLASS, "default")
    stop = threading.Event()
    barrier = threading.Barrier(len(uuids))

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        barrier.abort()

    def on_degraded(signum: int, frame: FrameType | None) -> None:
        slow = ", ".join(f"{g.uuid}={g.speed:.2f}" for g in read_slow_gpus())
        print(f"fairlane.demo: degraded: {slow}", flush=True)
        if args.exit_on_degraded:
            on_stop(signum, frame)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_degraded)
    threads = [
        threading.Thread(
            target=_rank,
            args=(
                Reporter.from_env(local_rank=i),
                args.base_s / hidden_speed(speeds, uuid, job_class),
                args.steps,
                barrier,
                stop,
            ),
        )
        for i, uuid in enumerate(uuids)
    ]
    for thread in threads:
        thread.start()
    print(f"fairlane.demo: running {len(uuids)} ranks", flush=True)
    while any(t.is_alive() for t in threads):
        for thread in threads:
            thread.join(0.1)
    print(f"fairlane.demo: stopped={stop.is_set()}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
