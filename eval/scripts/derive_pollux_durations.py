"""How long each Pollux workload job runs at its fixed size, from Pollux's own measurements.

    git -C ADAPTDL archive osdi21-artifact simulator/traces | tar -x -C /tmp/pollux
    .venv/bin/python eval/scripts/derive_pollux_durations.py /tmp/pollux/simulator/traces \
        eval/fairlane_eval/data/pollux/workload-*.csv \
        > eval/fairlane_eval/data/pollux/durations.csv

Input: petuum/adaptdl @ c793c708 (branch osdi21-artifact) : simulator/traces/<app>/ (Apache-2.0),
Pollux's measurements on its testbed (16 nodes x 4 NVIDIA T4): ``placements.csv`` and
``scalability.csv`` (step and gradient-sync time per placement and per-GPU batch size) and
``validation-<batch size>.csv`` (per epoch: cumulative statistical progress, iterations,
gradient noise statistics).

Pollux does not give a job a number of steps. Its simulator trains each application for a
fixed number of epochs (bert 2, cifar10 100, deepspeech2 80, imagenet 90, ncf 10, yolov3 50,
set in its applications.py), and an epoch is a quantity of statistical progress, reached at a
rate ``gain / step time`` where ``gain = (var + sqr) / (var / scale + sqr)`` is the
statistical efficiency of the batch size (``scale`` = batch size / the application's smallest
measured one). For a job pinned to the workload's ``num_replicas`` and ``batch_size`` (how
Pollux runs its Tiresias baseline) that gives a duration; this script computes it the same
way Pollux's simulator does, written anew from that description:

- per-GPU batch ``ceil(batch / replicas)``, split into gradient-accumulation micro-steps of
  at most the largest measured per-GPU batch (at least one accumulation step when a single
  GPU takes more than the smallest batch), micro-batch = ceil(per-GPU / (steps + 1));
- replicas packed 4 per node; step and sync time interpolated linearly in the micro-batch
  on the measured placement (or, beyond 4 nodes, on ``scalability.csv``'s rows for that node
  and replica count); a step with accumulation costs ``step + steps x (step - sync)``;
- epoch ``e`` ends at the smallest cumulative progress any measured batch size reached by
  then; its gradient statistics are interpolated linearly between the measured batch sizes.

Left out: Pollux's 30 s restart delay when a job starts, its rounding of each epoch to
whole seconds, and interference. ``estimate_s`` is Pollux's own quicker estimate
(iterations to the last epoch x step time, ``get_configurations``), for comparison.
"""

from __future__ import annotations

import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
GPUS_PER_NODE = 4

Columns = dict[str, list[float]]


def read_columns(path: Path) -> Columns:
    columns: Columns = defaultdict(list)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            for name, value in row.items():
                columns[name].append(float(value))
    return dict(columns)


class Application:
    def __init__(self, traces: Path, name: str) -> None:
        folder = traces / name
        self.validation = {
            int(p.stem.split("-")[1]): read_columns(p) for p in folder.glob("validation-*.csv")
        }
        self.placements = read_columns(folder / "placements.csv")
        self.scalability = read_columns(folder / "scalability.csv")
        self.epochs = MAX_EPOCHS[name]
        self.init_bsz = min(self.validation)
        self.max_bsz = max(self.validation)
        self.max_local = MAX_LOCAL_BSZ.get(name, int(max(self.placements["local_bsz"])))

    def micro_batch(self, replicas: int, batch: int) -> tuple[int, int]:
        local = math.ceil(batch / replicas)
        accum = math.ceil(local / self.max_local) - 1
        if replicas == 1 and batch > self.init_bsz:
            accum = max(1, accum)
        micro = math.ceil(local / (accum + 1))
        return min(micro, self.max_bsz // (replicas * (accum + 1))), accum

    def step_times(self, replicas: int, micro: int) -> tuple[float, float]:
        nodes = [GPUS_PER_NODE] * (replicas // GPUS_PER_NODE)
        if replicas % GPUS_PER_NODE:
            nodes.append(replicas % GPUS_PER_NODE)
        placement = min(tuple(nodes[i:] + nodes[:i]) for i in range(len(nodes)))
        ident = float("".join(map(str, placement)))
        table, select = self.placements, [p == ident for p in self.placements["placement"]]
        if not any(select):
            table = self.scalability
            select = [
                n == len(nodes) and r == replicas
                for n, r in zip(table["num_nodes"], table["num_replicas"], strict=True)
            ]
        if not any(select):
            raise SystemExit(f"no measurement for {replicas} replicas on {len(nodes)} nodes")
        pick = np.asarray(select)
        bsz = np.asarray(table["local_bsz"])[pick]
        order = np.argsort(bsz)
        step = float(np.interp(micro, bsz[order], np.asarray(table["step_time"])[pick][order]))
        sync = float(np.interp(micro, bsz[order], np.asarray(table["sync_time"])[pick][order]))
        return step, sync

    def grad_stats(self, batch: int, epoch: int) -> tuple[float, float]:
        sizes = sorted(self.validation)
        sqr = [self.validation[b]["grad_sqr"][epoch] for b in sizes]
        var = [self.validation[b]["grad_var"][epoch] for b in sizes]
        return float(np.interp(batch, sizes, sqr)), float(np.interp(batch, sizes, var))

    def duration_s(self, replicas: int, batch: int) -> dict[str, float]:
        micro, accum = self.micro_batch(replicas, batch)
        step, sync = self.step_times(replicas, micro)
        step_s = step + accum * (step - sync)
        actual = replicas * micro * (accum + 1)
        scale = actual / self.init_bsz
        total, done = 0.0, 0.0
        for epoch in range(self.epochs):
            target = min(v["progress"][epoch] for v in self.validation.values())
            sqr, var = self.grad_stats(actual, epoch)
            gain = (var + sqr) / (var / scale + sqr)
            total += (target - done) * step_s / gain
            done = target
        iterations = self.validation[batch]["iteration"][self.epochs - 1]
        return {
            "micro_batch": micro,
            "accum_steps": accum,
            "step_time_s": step_s,
            "iterations": iterations,
            "estimate_s": iterations * step_s,
            "duration_s": total,
        }


def main(traces: str, workloads: list[str]) -> None:
    configs: set[tuple[str, int, int]] = set()
    for path in workloads:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                configs.add((row["application"], int(row["num_replicas"]), int(row["batch_size"])))
    apps = {name: Application(Path(traces), name) for name in sorted({c[0] for c in configs})}
    out = csv.writer(sys.stdout, lineterminator="\n")
    fields = ["micro_batch", "accum_steps", "step_time_s", "iterations", "estimate_s", "duration_s"]
    out.writerow(["application", "num_replicas", "batch_size", *fields])
    for app, replicas, batch in sorted(configs):
        result = apps[app].duration_s(replicas, batch)
        cells = [
            f"{result[k]:.0f}"
            if k in ("micro_batch", "accum_steps", "iterations")
            else f"{result[k]:.4f}"
            for k in fields
        ]
        out.writerow([app, replicas, batch, *cells])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
