"""`make eval`'s report in its quick form: every section, table and chart is written."""

from __future__ import annotations

from pathlib import Path

from fairlane_eval.report import ReportPlan, write_report


def test_the_quick_report_writes_every_table_and_chart(tmp_path: Path) -> None:
    target = write_report(ReportPlan(seeds=1, quick=True), tmp_path, "test")
    text = target.read_text()
    for section in ("One throttled GPU", "Headline", "Heterogeneity", "Sensitivity"):
        assert f"## {section}" in text
    assert "| **oracle** |" in text
    charts = sorted(p.name for p in tmp_path.glob("*.png"))
    assert "eval-timeline.png" in charts
    assert "eval-jct-cdf.png" in charts
    assert len([c for c in charts if c.startswith("eval-gain-")]) == 4
    assert len([c for c in charts if c.startswith("eval-sensitivity-")]) == 2
    for chart in charts:
        assert f"({chart})" in text
