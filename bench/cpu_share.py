"""CPU cores each process uses, second by second, while a benchmark runs beside it.

On a 2-core machine the broker, the load generator and the worker under test share the
cores; this tells how much of them each got in each phase of a run (docs/benchmarks-history.md,
the scorer's latency sweep):

    .venv/bin/python -m bench.cpu_share --seconds 40 > cpu.log &
    .venv/bin/python -m bench.scorer_throughput --bootstrap ... --latency-of-max 0.5
    .venv/bin/python -m bench.cpu_share --summary cpu.log --from 13 --to 28

Each line: seconds since the start, then ``name:cores`` for the busiest processes, named
by what they run (kafka-PORT: the broker of scripts/kafka.sh on that port; scorer: a
Faust worker; bench.NAME: the benchmark ``bench.NAME``); the first line gives the start
on the system's monotonic clock, which ``bench.scorer_throughput`` prints its steady
phase on.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections import defaultdict
from pathlib import Path

_TICKS_S = os.sysconf("SC_CLK_TCK")
_SHOWN = 6


def _name(cmdline: str) -> str:
    if "java" in cmdline and "kafka" in cmdline:
        port = re.search(r"kafka-(\d+)", cmdline)  # scripts/kafka.sh's data directory
        return f"kafka-{port[1]}" if port else "kafka"
    if "fairlane_scorer" in cmdline or "faust" in cmdline:
        return "scorer"
    for word in cmdline.split():
        if word.startswith("bench."):  # python -m bench.NAME
            return word
        if "/bench/" in word:
            return "bench." + Path(word).stem
    return Path(cmdline.split(" ", 1)[0]).name or "?"


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    """Every process's user + system ticks so far, with its name."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():  # not this tool's own reading
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # the process ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        found[int(entry)] = (int(fields[11]) + int(fields[12]), _name(cmdline.decode()))
    return found


def sample(seconds: float) -> None:
    start, before = time.monotonic(), _cpu_ticks()
    print(f"# start monotonic {start:.1f}", flush=True)
    while time.monotonic() - start < seconds:
        time.sleep(1.0)
        now = _cpu_ticks()
        used = [
            ((ticks - before[pid][0]) / _TICKS_S, name)
            for pid, (ticks, name) in now.items()
            if pid in before and ticks > before[pid][0]
        ]
        busiest = sorted(used, reverse=True)[:_SHOWN]
        print(
            f"{time.monotonic() - start:6.1f} "
            + " ".join(f"{name}:{cores:.2f}" for cores, name in busiest),
            flush=True,
        )
        before = now


def summary(log: Path, first_s: float, last_s: float) -> None:
    """Mean cores per name over the lines from ``first_s`` to ``last_s``."""
    totals: dict[str, float] = defaultdict(float)
    lines = 0
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        at, *shares = line.split()
        if first_s <= float(at) <= last_s:
            lines += 1
            for share in shares:
                name, cores = share.rsplit(":", 1)
                totals[name] += float(cores)
    for name, total in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"{name}: {total / max(lines, 1):.2f} cores (mean of {lines} s)")


def sampler_options(doc: str | None, seconds: float) -> argparse.ArgumentParser:
    """The options of a tool that samples once a second into a log (``--seconds``) or
    sums up such a log over a span (``--summary LOG --from S --to S``)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--summary", type=Path, help="a log of this tool's to sum up")
    parser.add_argument("--from", dest="first_s", type=float, default=0.0)
    parser.add_argument("--to", dest="last_s", type=float, default=float("inf"))
    return parser


def main() -> None:
    args = sampler_options(__doc__, seconds=60.0).parse_args()
    if args.summary is not None:
        summary(args.summary, args.first_s, args.last_s)
    else:
        sample(args.seconds)


if __name__ == "__main__":
    main()
