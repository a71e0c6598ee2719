"""CI's chaos run: the suite's short version (each fault once, 15 s outages, 30 s of
sustained load) on a stack of its own ports, FAIRLANE_CHAOS_* (tests/chaos/stack.py).
Every row must hold: nothing lost, nothing duplicated where the contract says once,
recovered in time. ``make chaos`` is the full version (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.context import Plan
from tests.chaos.report import table
from tests.chaos.suite import run_suite

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_short_chaos_suite_loses_nothing(tmp_path: Path) -> None:
    rows = run_suite(Plan.short(), tmp_path / "chaos")
    print(table(rows))  # shown with -s or on failure: the run's record
    assert [r for r in rows if not r.ok] == [], table(rows)
