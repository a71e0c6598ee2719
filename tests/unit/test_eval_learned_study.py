"""The learned-speed study's own arithmetic: captured share and time to learn."""

from __future__ import annotations

import io
import math

import pytest

from fairlane_eval.learned_study import captured_share, main, time_to_learn


@pytest.mark.parametrize(
    ("static", "learned", "oracle", "share"),
    [
        (10.0, 9.0, 8.0, 0.5),
        (10.0, 8.0, 8.0, 1.0),
        (10.0, 11.0, 8.0, -0.5),
        (10.0, 9.0, 10.0, None),
    ],
)
def test_captured_share_is_the_learned_part_of_the_oracles_gain(
    static: float, learned: float, oracle: float, share: float | None
) -> None:
    result = captured_share(static, learned, oracle)
    if share is None:
        assert math.isnan(result)
    else:
        assert result == pytest.approx(share)


def test_time_to_learn_is_a_few_job_minutes_for_resnet50() -> None:
    times = time_to_learn(0, "resnet50", minutes=60)
    assert times  # Longhorn's ResNet-50 spread puts some GPUs > 3 % off the median
    assert all(1 <= t <= 60 for t in times)
    assert time_to_learn(0, "resnet50", minutes=60) == times  # deterministic


def test_the_script_prints_the_time_to_learn_table() -> None:
    out = io.StringIO()
    assert main(["--skip-fleet", "--seeds", "1"], out) == 0
    assert "| resnet50 |" in out.getvalue()
