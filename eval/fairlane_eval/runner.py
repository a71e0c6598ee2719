"""Running trials in parallel processes, with a progress bar (the I/O around core/)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from tqdm import tqdm

from fairlane_eval.core.experiment import Setup, run_trial
from fairlane_eval.core.metrics import Summary

__all__ = ["Trial", "run_trials"]


@dataclass(frozen=True)
class Trial:
    """One run; equal when of the same Setup object (setups compare by identity)."""

    setup: Setup
    policy: str
    seed: int


#: The trials of the pool being run: forked workers inherit them, so only an index
#: crosses the process boundary (setups hold read-only mappings that do not pickle).
_PENDING: list[Trial] = []


def _run(trial: Trial) -> Summary:
    return run_trial(trial.setup, trial.policy, trial.seed)


def _run_pending(i: int) -> Summary:
    return _run(_PENDING[i])


def run_trials(
    trials: Sequence[Trial], *, workers: int | None = None, label: str = "trials"
) -> dict[Trial, Summary]:
    """Every trial's summary; trials run in ``workers`` processes (default: the CPUs)."""
    workers = workers or os.cpu_count() or 1
    results: dict[Trial, Summary] = {}
    bar = tqdm(total=len(trials), desc=label, unit="trial", dynamic_ncols=True)
    if workers == 1:
        for trial in trials:
            results[trial] = _run(trial)
            bar.update()
    else:
        _PENDING[:] = _longest_first(trials)
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=fork) as pool:
            futures = {pool.submit(_run_pending, i): t for i, t in enumerate(_PENDING)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        _PENDING.clear()
    bar.close()
    return results


def _longest_first(trials: Iterable[Trial]) -> list[Trial]:
    """Scored policies take longest; starting them first keeps the pool busy to the end."""
    return sorted(trials, key=lambda t: (not t.policy.startswith("fairlane"), t.seed))
