"""`fairlane-eval run`: a shipped trace and a user's own CSVs, end to end in one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairlane_eval.__main__ import main
from fairlane_eval.core.workload import Job, write_jobs_csv


def test_run_replays_a_shipped_trace_under_chosen_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--trace", "pollux-workload-1", "--max-jobs", "12", "--cluster", "T4:2"]
    argv += ["--seeds", "2", "--policies", "static,fairlane-fastest", "--workers", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pollux-workload-1: 12 jobs on 16 GPUs" in out
    assert "fairlane-fastest" in out
    assert "[" in out  # a confidence interval over the two seeds


def test_run_replays_a_users_jobs_throughputs_and_gpu_speeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        write_jobs_csv([Job(f"j{i}", 60.0 * i, 2, 1, "mine", 3600.0) for i in range(6)])
    )
    throughputs = tmp_path / "throughputs.csv"
    throughputs.write_text("job_type,model,scale_factor,steps_per_s\nmine,V100,2,1.5\n")
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("relative_speed\n0.95\n1.0\n1.02\n")
    argv = ["run", "--jobs", str(jobs), "--throughputs", str(throughputs)]
    argv += ["--variability", str(speeds), "--cluster", "V100:1", "--seeds", "1"]
    argv += ["--policies", "static,oracle-fastest", "--workers", "1", "--rate", "0"]
    assert main(argv) == 0
    assert "jobs.csv: 6 jobs on 8 GPUs" in capsys.readouterr().out
