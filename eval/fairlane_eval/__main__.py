"""`fairlane-eval`: replay a trace under every policy, or write the whole evaluation.

fairlane-eval run --trace pollux-workload-1 --cluster T4:24 --rate 4 --seeds 3
fairlane-eval run --jobs my.csv --throughputs mine.csv --variability gpus.csv ...
fairlane-eval run ... --cluster T4:16x4,A100-40GB:2x8 --json   # nodes of two sizes
fairlane-eval report [--quick] [--out docs]        # what `make eval` runs
fairlane-eval straggler [--out docs]               # the PAI straggler check's chart
fairlane-eval live ...                             # the live-stack comparison
fairlane-eval sharing --seeds 5 [--trace gpushare100] [--cpu]  # fractional packing

Input that cannot be used (a bad CSV row, an unknown option, a cluster that cannot
take a job) is one line on stderr, ``fairlane-eval: FILE:LINE: what is wrong``, and exit
status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from fairlane_eval.errors import (
    ClusterError,
    OptionError,
    ThroughputError,
    VariabilityError,
    WorkloadError,
)
from fairlane_eval.report import ReportPlan, write_report
from fairlane_eval.run_command import add_run_parser, run_command
from fairlane_eval.sharing_command import add_sharing_parser, sharing_command

__all__ = ["main"]

PROG = "fairlane-eval"
#: Bad input: reported as one line and exit status 2, never as a traceback.
INPUT_ERRORS = (
    ClusterError,
    OptionError,
    ThroughputError,
    VariabilityError,
    WorkloadError,
    OSError,
)
USAGE_STATUS = 2


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors reported as the input errors are (one line, status 2)."""

    def error(self, message: str) -> NoReturn:
        raise OptionError(f"{message} (see {self.prog} --help)")


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    _say(f"warning: {message}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    report = sub.add_parser("report", help="the whole evaluation, written to docs/")
    report.add_argument("--out", type=Path, default=Path("docs"))
    report.add_argument("--seeds", type=int, default=5)
    report.add_argument("--quick", action="store_true", help="a small smoke version")
    straggler = sub.add_parser("straggler", help="the straggler model against PAI's data")
    straggler.add_argument("--out", type=Path, default=Path("docs"))
    sub.add_parser("live", help="the live-stack comparison (see docs/evaluation-live.md)")
    add_sharing_parser(sub)
    return parser


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "sharing":
            return sharing_command(args, sys.stdout, _say)
        return run_command(args, sys.stdout, _warn)
    except INPUT_ERRORS as exc:
        _say(_describe(exc))
        return USAGE_STATUS


def main(argv: list[str] | None = None) -> int:
    try:
        args, rest = _parser().parse_known_args(argv)
        if rest and args.command != "live":
            raise OptionError(
                f"unrecognized arguments: {' '.join(rest)} (see {PROG} {args.command} --help)"
            )
    except OptionError as exc:
        _say(str(exc))
        return USAGE_STATUS
    if args.command in {"run", "sharing"}:
        return _run(args)
    if args.command == "report":
        command = "fairlane-eval report" + (" --quick" if args.quick else "")
        plan = ReportPlan(seeds=args.seeds, quick=args.quick)
        print(f"wrote {write_report(plan, args.out, command)}")
        return 0
    if args.command == "straggler":
        from fairlane_eval.charts.straggler import write_straggler_chart

        print(f"wrote {write_straggler_chart(args.out)}")
        return 0
    from fairlane_eval.live import live_main

    return live_main(rest)


if __name__ == "__main__":
    sys.exit(main())
