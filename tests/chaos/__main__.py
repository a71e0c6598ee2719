"""``python -m tests.chaos [--short] [--only NAME ...] [--out FILE]`` (``make chaos``)."""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from tests.chaos.context import Plan
from tests.chaos.report import table
from tests.chaos.suite import SCENARIOS, run_suite
from tests.servers import ROOT


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="CI's version: shorter faults")
    parser.add_argument("--only", nargs="+", choices=list(SCENARIOS), help="these scenarios")
    parser.add_argument("--state-dir", type=Path, default=ROOT / ".local" / "chaos")
    parser.add_argument("--out", type=Path, help="also write the table (Markdown) here")
    args = parser.parse_args()
    plan = Plan.short() if args.short else Plan.full()
    rows = run_suite(plan, args.state_dir, args.only)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "make chaos" + (" CHAOS_ARGS=--short" if args.short else "")
    text = f"`{command}`, {when}\n\n{table(rows)}\n"
    print("\n" + text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
