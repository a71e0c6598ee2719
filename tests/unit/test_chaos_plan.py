"""The chaos suite's plan and table, without a stack."""

from __future__ import annotations

from tests.chaos.context import FULL_ORDER, Plan
from tests.chaos.load import outside_contract
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


def test_the_load_may_get_only_the_contracts_answers() -> None:
    fine = ["POST 201", "DELETE 200", "DELETE 404", "POST 409 no_capacity", "POST 202"]
    fine += [
        "POST 503+retry-after",
        "POST 429+retry-after",
        "POST unanswered (ConnectError), retried",
    ]
    odd = ["POST 403", "POST 500", "POST 503-bare", "POST 422", "DELETE 401"]
    assert [o for o in fine if outside_contract(o)] == []
    assert [o for o in odd if not outside_contract(o)] == []
