"""The chaos suite's plan and table, without a stack."""

from __future__ import annotations

from tests.chaos.context import FULL_ORDER, Plan
from tests.chaos.report import Row, table
from tests.chaos.suite import SCENARIOS


def test_both_plans_run_every_scenario_once() -> None:
    for plan in (Plan.full(), Plan.short()):
        assert sorted(plan.order) == sorted(SCENARIOS) == sorted(FULL_ORDER)


def test_the_short_plan_is_shorter_in_every_fault() -> None:
    short, full = Plan.short(), Plan.full()
    assert short.outage_s < full.outage_s
    assert short.partition_s < full.partition_s
    assert short.sustained_s < full.sustained_s


def test_a_broken_guarantee_fails_its_row_and_shows_in_the_table() -> None:
    good, bad = Row("calm"), Row("stormy")
    good.check(True, "never shown")
    bad.check(False, "3 samples lost")
    text = table([good, bad])
    assert good.ok
    assert not bad.ok
    assert "| calm |" in text
    assert "| ok |" in text
    assert "FAIL: 3 samples lost" in text
    assert "never shown" not in text
