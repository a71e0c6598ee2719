"""`fairlane-eval run --class-speeds` with the learning policies."""

from __future__ import annotations

import pytest

from fairlane_eval.__main__ import main


def test_run_takes_class_speeds_and_the_learning_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--trace", "gavel-multi", "--max-jobs", "8", "--cluster", "V100:4x4"]
    argv += ["--seeds", "1", "--workers", "1", "--rate", "0", "--class-speeds"]
    argv += ["--policies", "static,fairlane-learned,oracle-learned"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "fairlane-learned" in out
    assert "oracle-learned" in out
