"""Throughput tables: Gavel's JSON converter, the documented CSV, the rule where not measured."""

from __future__ import annotations

import json

import pytest

from fairlane_eval.core.throughputs import (
    Fill,
    ThroughputError,
    ThroughputTable,
    gavel_throughputs,
    nearest_scale_factor,
    read_throughputs_csv,
    shipped_throughputs,
    write_throughputs_csv,
)
from fairlane_events.gpu_models import CATALOG

# A slice of simulation_throughputs.json as Gavel writes it: per model, per
# "('<type>', <scale>)", the isolated rate under "null" and co-located pairs beside it.
GAVEL_JSON = json.dumps(
    {
        "v100": {
            "('A3C', 1)": {"null": 7.0, "('A3C', 1)": [3.0, 3.0]},
            "('LM (batch size 5)', 1)": {"null": 100.0},
            "('LM (batch size 5)', 4)": {"null": 300.0},
        },
        "k80": {"('A3C', 1)": {"null": 3.5}, "('LM (batch size 5)', 4)": {"null": 0.0}},
        "v100_unconsolidated": {"('A3C', 1)": {"null": 1.0}},
    }
)


@pytest.fixture
def table() -> ThroughputTable:
    return gavel_throughputs(GAVEL_JSON)


def test_gavel_json_keeps_isolated_rates_of_consolidated_models(table: ThroughputTable) -> None:
    assert dict(table.rates) == {
        ("A3C", "K80", 1): 3.5,
        ("A3C", "V100", 1): 7.0,
        ("LM (batch size 5)", "K80", 4): 0.0,
        ("LM (batch size 5)", "V100", 1): 100.0,
        ("LM (batch size 5)", "V100", 4): 300.0,
    }
    assert table.job_types() == ("A3C", "LM (batch size 5)")
    assert table.models() == ("K80", "V100")
    assert table.scale_factors("LM (batch size 5)") == (1, 4)


V100_PER_H100 = CATALOG["H100"].relative_speed / CATALOG["V100"].relative_speed


@pytest.mark.parametrize(
    ("job_type", "model", "gpus", "expected"),
    [
        ("A3C", "V100", 1, 7.0),  # measured
        ("A3C", "Tesla V100-SXM2-32GB", 1, 7.0),  # NVML name maps to the key
        ("A3C", "K80", 1, 3.5),
        ("A3C", "V100", 8, 56.0),  # only 1 measured: linear from it
        ("LM (batch size 5)", "V100", 2, 150.0),  # 2 is as near 1 as 4 by ratio: tie -> 4
        ("LM (batch size 5)", "V100", 3, 225.0),  # nearest 4: 300 x 3/4
        ("LM (batch size 5)", "V100", 16, 1200.0),  # beyond the largest: 300 x 16/4
        ("LM (batch size 5)", "K80", 8, 0.0),  # did not run stays did not run
        ("A3C", "H100", 1, 7.0 * V100_PER_H100),  # unmeasured model: V100 x catalogue ratio
        ("LM (batch size 5)", "H100", 8, 600.0 * V100_PER_H100),
    ],
)
def test_steps_per_s(
    table: ThroughputTable, job_type: str, model: str, gpus: int, expected: float
) -> None:
    assert table.steps_per_s(job_type, model, gpus) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("measured", "gpus", "nearest"),
    [
        ((1, 2, 4, 8), 3, 4),
        ((1, 2, 4, 8), 6, 8),
        ((1, 2, 4, 8), 64, 8),
        ((1, 4), 2, 4),
        ((8,), 1, 8),
    ],
)
def test_nearest_scale_factor_by_ratio_ties_to_larger(
    measured: tuple[int, ...], gpus: int, nearest: int
) -> None:
    assert nearest_scale_factor(measured, gpus) == nearest


@pytest.mark.parametrize(
    ("job_type", "model", "gpus", "message"),
    [
        ("BERT", "V100", 1, "unknown job type 'BERT'"),
        ("A3C", "RTX 4090", 1, "unknown GPU model"),
        ("A3C", "V100", 0, "gpus must be >= 1"),
    ],
)
def test_unanswerable_questions_raise(
    table: ThroughputTable, job_type: str, model: str, gpus: int, message: str
) -> None:
    with pytest.raises(ThroughputError, match=message):
        table.steps_per_s(job_type, model, gpus)


def test_unmeasured_model_needs_a_v100_figure() -> None:
    only_k80 = ThroughputTable({("A3C", "K80", 1): 3.5})
    with pytest.raises(ThroughputError, match="no H100 or V100 figure"):
        only_k80.steps_per_s("A3C", "H100", 1)


def test_fills_name_each_unmeasured_model_once_with_its_prior(table: ThroughputTable) -> None:
    # A3C is measured on K80 and V100, LM only on V100 (and K80 at 4 GPUs, which counts).
    fills = table.fills(["A3C", "LM (batch size 5)", "A3C"], ["V100", "K80", "H100", "T4"])
    v100 = CATALOG["V100"].relative_speed
    assert fills == (
        Fill("H100", ("A3C", "LM (batch size 5)"), CATALOG["H100"].relative_speed / v100),
        Fill("T4", ("A3C", "LM (batch size 5)"), CATALOG["T4"].relative_speed / v100),
    )
    assert table.fills(["A3C"], ["Tesla K80"]) == ()  # an NVML name reads as its key
    factor = fills[0].factor
    assert table.steps_per_s("A3C", "H100", 1) == pytest.approx(7.0 * factor)


def test_csv_round_trip(table: ThroughputTable) -> None:
    text = write_throughputs_csv(table)
    assert text.splitlines()[:2] == ["job_type,model,scale_factor,steps_per_s", "A3C,K80,1,3.5"]
    assert read_throughputs_csv(text) == table


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_type,model,steps_per_s\nA3C,V100,7\n", r"t\.csv:1: missing column\(s\) scale_factor"),
        (
            "job_type,model,scale_factor,steps_per_s\nA3C,V100,1,7\nA3C,V100,x,7\n",
            r"t\.csv:3: scale_factor: not an integer: 'x'",
        ),
        (
            "job_type,model,scale_factor,steps_per_s\nA3C,V100,1,-1\n",
            r"t\.csv:2: steps_per_s: must be >= 0",
        ),
        (
            "job_type,model,scale_factor,steps_per_s\nA3C,V100,1,7\nA3C,Tesla V100-SXM2-32GB,1,8\n",
            r"t\.csv:3: job_type: \('A3C', 'V100', 1\) repeats line 2",
        ),
        ("job_type,model,scale_factor,steps_per_s\n", r"t\.csv: no rows"),
    ],
)
def test_bad_csv_names_line_and_field(text: str, message: str) -> None:
    with pytest.raises(ThroughputError, match=message):
        read_throughputs_csv(text, source="t.csv")


def test_shipped_table_is_gavels_measurements() -> None:
    shipped = shipped_throughputs()
    assert len(shipped.job_types()) == 26
    assert shipped.models() == ("K80", "P100", "V100")
    assert len(shipped.rates) == 249
    # Values of gavel/isolated_throughputs_steps_per_sec.tsv (Gavel @ c4fa4009, rounded).
    assert shipped.steps_per_s("A3C", "V100", 1) == pytest.approx(7.176, abs=1e-3)
    assert shipped.steps_per_s("CycleGAN", "K80", 1) == pytest.approx(0.505, abs=1e-3)
    assert shipped.steps_per_s("LM (batch size 10)", "V100", 8) == pytest.approx(615.093, abs=1e-3)
    assert shipped.steps_per_s("ResNet-50 (batch size 128)", "P100", 4) == pytest.approx(
        5.191, abs=1e-3
    )
    assert shipped.steps_per_s("ResNet-50 (batch size 128)", "K80", 2) == 0.0
