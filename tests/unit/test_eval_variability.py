"""Per-GPU variability: the documented CSV and the shipped default (PAL's V100s)."""

from __future__ import annotations

from importlib import resources

import pytest

from fairlane_eval.core.fleet_variability import (
    VariabilityError,
    default_variability,
    read_variability_csv,
    speeds_for_model,
)
from fairlane_sim.variability import measured_speeds


def test_speeds_group_by_catalogue_model_sorted() -> None:
    text = (
        "gpu,model,relative_speed\n"
        "n1-0,Tesla V100-SXM2-32GB,1.02\n"
        "n1-1,V100,0.91\n"
        "n2-0,NVIDIA H100 80GB HBM3,0.99\n"
        "n3-0,,1.0\n"
    )
    assert dict(read_variability_csv(text)) == {
        "V100": (0.91, 1.02),
        "H100": (0.99,),
        None: (1.0,),
    }


def test_model_column_is_optional_and_other_columns_ignored() -> None:
    pal = resources.files("fairlane_sim").joinpath("data", "pal_resnet50_v100_speed.csv")
    variability = read_variability_csv(pal.read_text())
    assert dict(variability) == {None: measured_speeds()}
    assert len(variability[None]) == 336


def test_default_is_pals_measurement_for_any_model() -> None:
    assert dict(default_variability()) == {None: measured_speeds()}
    assert len(default_variability()[None]) == 336


@pytest.mark.parametrize(
    ("model", "expected"),
    [("V100", (0.9,)), ("Tesla V100-SXM2-32GB", (0.9,)), ("H100", (1.0, 1.1))],
)
def test_a_model_uses_its_own_speeds_else_the_any_model_ones(
    model: str, expected: tuple[float, ...]
) -> None:
    variability = read_variability_csv("model,relative_speed\nV100,0.9\n,1.1\n,1.0\n")
    assert speeds_for_model(variability, model) == expected


def test_a_model_without_speeds_and_no_fallback_is_an_error() -> None:
    variability = read_variability_csv("model,relative_speed\nV100,0.9\n")
    with pytest.raises(VariabilityError, match="no speeds for H100"):
        speeds_for_model(variability, "H100")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("V100,fast", r"v\.csv:2: relative_speed: not a number: 'fast'"),
        ("V100,0", r"v\.csv:2: relative_speed: must be in \(0, 10\]"),
        ("V100,117.6", r"v\.csv:2: relative_speed: must be in \(0, 10\]"),
        ("V100,", r"v\.csv:2: relative_speed: missing value"),
        ("RTX 4090,1.0", r"v\.csv:2: model: unknown GPU model 'RTX 4090'"),
    ],
)
def test_bad_csv_names_line_and_field(body: str, message: str) -> None:
    with pytest.raises(VariabilityError, match=message):
        read_variability_csv(f"model,relative_speed\n{body}\n", source="v.csv")


def test_empty_or_headless_csv_is_an_error() -> None:
    with pytest.raises(VariabilityError, match=r"v\.csv: no rows"):
        read_variability_csv("relative_speed\n", source="v.csv")
    with pytest.raises(VariabilityError, match=r"v\.csv:1: missing column\(s\) relative_speed"):
        read_variability_csv("gpu,speed\nx,1\n", source="v.csv")
