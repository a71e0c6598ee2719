"""`fairlane-eval run`: a shipped trace and a user's own CSVs, end to end in one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairlane_eval.__main__ import main
from fairlane_eval.core.workload import Job, write_jobs_csv

QUICK = ["--seeds", "1", "--workers", "1", "--rate", "0"]


def test_run_replays_a_shipped_trace_under_chosen_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--trace", "pollux-workload-1", "--max-jobs", "12", "--cluster", "T4:4"]
    argv += ["--seeds", "2", "--policies", "static,fairlane-fastest", "--workers", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pollux-workload-1: 12 jobs on 32 GPUs" in out
    assert "fairlane-fastest" in out
    assert "[" in out  # a confidence interval over the two seeds


def user_files(tmp_path: Path, jobs: list[Job] | None = None) -> list[str]:
    """A user's jobs (six 2-GPU jobs of type "mine"), throughputs and GPU speeds."""
    path = tmp_path / "jobs.csv"
    path.write_text(
        write_jobs_csv(jobs or [Job(f"j{i}", 60.0 * i, 2, 1, "mine", 3600.0) for i in range(6)])
    )
    throughputs = tmp_path / "throughputs.csv"
    throughputs.write_text("job_type,model,scale_factor,steps_per_s\nmine,V100,2,1.5\n")
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("relative_speed\n0.95\n1.0\n1.02\n")
    return ["--jobs", str(path), "--throughputs", str(throughputs), "--variability", str(speeds)]


def test_run_replays_a_users_jobs_throughputs_and_gpu_speeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", *QUICK]
    argv += ["--policies", "static,oracle-fastest"]
    assert main(argv) == 0
    assert "jobs.csv: 6 jobs on 8 GPUs" in capsys.readouterr().out


# ------------------------------------------------------- input errors: one line, status 2


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_a_bad_jobs_row_is_one_line_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", *QUICK]
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(jobs.read_text().replace("j2,120,2,", "j2,120,0,"))
    assert main(argv) == 2
    assert one_line_error(capsys) == (
        f"fairlane-eval: {jobs}:4: gpus_per_node: must be 1..64, got 0"
    )


def test_a_bad_variability_row_names_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", *QUICK]
    (tmp_path / "speeds.csv").write_text("relative_speed\n0.95\nfast\n")
    assert main(argv) == 2
    line = one_line_error(capsys)
    assert (
        line == f"fairlane-eval: {tmp_path / 'speeds.csv'}:3: relative_speed: not a number: 'fast'"
    )


def test_a_bad_throughputs_row_names_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", *QUICK]
    (tmp_path / "throughputs.csv").write_text(
        "job_type,model,scale_factor,steps_per_s\nmine,V100,0,1\n"
    )
    assert main(argv) == 2
    assert f"{tmp_path / 'throughputs.csv'}:2: scale_factor:" in one_line_error(capsys)


def test_a_job_type_without_throughputs_fails_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = [Job("a", 0.0, 1, 1, "mine", 10.0), Job("b", 5.0, 1, 1, "theirs", 10.0)]
    argv = ["run", *user_files(tmp_path, jobs), "--cluster", "V100:1", *QUICK]
    assert main(argv) == 2
    assert one_line_error(capsys) == (
        f"fairlane-eval: {tmp_path / 'jobs.csv'}:3: job_type: 'theirs' has no throughputs; "
        "known: 'mine'"
    )


def test_a_model_without_gpu_speeds_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1,T4:1", *QUICK]
    (tmp_path / "speeds.csv").write_text("model,relative_speed\nV100,0.95\n")
    assert main(argv) == 2
    assert "speeds.csv: no speeds for T4" in one_line_error(capsys)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["--seeds", "0"], "argument --seeds: must be >= 1, got 0"),
        (["--cluster", "V100:2x0"], "V100: GPUs per node must be 1..64, got 0"),
        (["--cluster", "V100"], "expected MODEL:NODES or MODEL:NODESxGPUS_PER_NODE"),
        (["--policies", "static,fastest"], "--policies: unknown fastest; known: static"),
        (["--baseline", "fairlane-spread"], "--baseline fairlane-spread is not among"),
        (["--recent-weight", "0"], "recent_weight must be in (0, 1)"),
        (["--interval-s", "0"], "argument --interval-s: must be > 0, got 0"),
        (["--threshold", "1.5"], "argument --threshold: must be in [0, 1], got 1.5"),
        (["--stabilization-s", "-5"], "argument --stabilization-s: must be >= 0, got -5"),
        (["--rate", "nan"], "argument --rate: must be finite, got nan"),
    ],
)
def test_a_bad_option_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    argv = ["run", *user_files(tmp_path), *QUICK, "--policies", "static", *options]
    assert main(argv) == 2
    line = one_line_error(capsys)
    assert line.startswith("fairlane-eval: ")
    assert message in line


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--jobs", str(tmp_path / "nope.csv"), *QUICK]) == 2
    assert one_line_error(capsys).startswith(f"fairlane-eval: {tmp_path / 'nope.csv'}: ")


# ------------------------------------------------------------------ the oracle


def test_the_oracle_is_selectable_and_can_be_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", *QUICK]
    assert main([*argv, "--policies", "static,oracle", "--baseline", "oracle"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0] for line in out.splitlines()[2:]}
    assert rows == {"static", "oracle"}  # the oracle's three members run, unshown
    assert "changes paired against oracle" in out


# ---------------------------------------------------------- columns and --json


def test_the_table_shows_finished_fairness_and_utilisation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", *QUICK, "--policies", "static"]
    assert main(argv) == 0
    header, row = capsys.readouterr().out.splitlines()[1:3]
    for column in ("finished", "mean JCT", "utilisation", "mean rho", "worst ns rho"):
        assert column in header
    assert row.split()[:2] == ["static", "6/6"]


def test_json_gives_the_same_results_machine_readable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), "--cluster", "V100:1", "--seeds", "2"]
    argv += ["--workers", "1", "--policies", "static,fairlane-fastest,oracle", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["name"], doc["jobs"], doc["gpus"], doc["unplaceable"]) == ("jobs.csv", 6, 8, 0)
    assert doc["cluster"] == [{"model": "V100", "nodes": 1, "gpus_per_node": 8}]
    assert doc["baseline"] == "static"
    assert [p["policy"] for p in doc["policies"]] == ["static", "fairlane-fastest", "oracle"]
    static, fastest, _ = doc["policies"]
    assert sorted(static["seeds"]) == ["0", "1"]
    assert static["mean"]["finished"] == 6
    assert static["seeds"]["0"]["utilisation"] > 0
    assert static["change"] == {}
    change = fastest["change"]["mean_jct_s"]
    assert set(change) == {"mean", "low", "high", "seeds"}
    assert change["seeds"] == 2
    assert doc["units"]["mean_jct_s"] == "s"


# ---------------------------------------------------------- node sizes and --gpus-per-node


def test_gpus_per_node_splits_a_shipped_traces_gangs(capsys: pytest.CaptureFixture[str]) -> None:
    # Pollux's workload has jobs of 8 to 32 GPUs: on nodes of 4 they must be split by 4.
    argv = ["run", "--trace", "pollux-workload-1", "--max-jobs", "12", *QUICK]
    assert main([*argv, "--cluster", "T4:8", "--gpus-per-node", "4", "--policies", "static"]) == 0
    out = capsys.readouterr().out
    assert "12 jobs on 32 GPUs" in out
    assert "12/12" in out


def test_a_shipped_trace_splits_by_the_clusters_smallest_node_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--trace", "pollux-workload-1", "--max-jobs", "12", *QUICK]
    assert main([*argv, "--cluster", "T4:7x4,T4:1x8", "--policies", "static", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["gpus"], doc["unplaceable"]) == (36, 0)
    assert doc["policies"][0]["mean"]["finished"] == 12


def test_gpus_per_node_that_applies_to_nothing_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", *user_files(tmp_path), *QUICK, "--cluster", "V100:1x8", "--gpus-per-node", "4"]
    assert main(argv) == 2
    assert "--gpus-per-node 4 applies to nothing" in one_line_error(capsys)


# ------------------------------------------------------------------ unplaceable jobs


def too_big(tmp_path: Path) -> list[str]:
    jobs = [Job(f"j{i}", 60.0 * i, 2, 1, "mine", 3600.0) for i in range(5)]
    jobs += [Job("huge", 10.0, 8, 2, "mine", 3600.0), Job("wide", 20.0, 16, 1, "mine", 10.0)]
    return ["run", *user_files(tmp_path, jobs), "--cluster", "V100:1", *QUICK]


def test_jobs_that_can_never_fit_fail_the_run_with_a_count_and_an_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*too_big(tmp_path), "--policies", "static"]) == 2
    warning, error = capsys.readouterr().err.strip().splitlines()
    assert warning == (
        "fairlane-eval: warning: 2 of 7 jobs can never be placed on V100:1 (e.g. huge: needs "
        "2 nodes of at least 8 GPUs it can run on; the cluster has 1)"
    )
    assert error.startswith("fairlane-eval: 2 jobs can never be placed on this cluster")
    assert "--allow-unplaceable" in error


def test_allow_unplaceable_runs_the_others_and_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*too_big(tmp_path), "--policies", "static", "--allow-unplaceable"]) == 0
    captured = capsys.readouterr()
    assert "warning: 2 of 7 jobs can never be placed" in captured.err
    assert "jobs.csv: 5 jobs (2 unplaceable left out) on 8 GPUs" in captured.out
    assert "5/5" in captured.out


# ------------------------------------------------------------------ filled throughputs


def test_a_model_missing_from_the_throughputs_is_warned_about_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = [Job("a", 0.0, 1, 1, "mine", 10.0), Job("b", 5.0, 1, 1, "other", 10.0)]
    argv = ["run", *user_files(tmp_path, jobs), "--cluster", "V100:1,T4:1,K80:1", *QUICK]
    (tmp_path / "throughputs.csv").write_text(
        "job_type,model,scale_factor,steps_per_s\nmine,V100,1,2\nother,V100,1,3\nmine,K80,1,1\n"
    )
    (tmp_path / "speeds.csv").write_text("relative_speed\n1.0\n")
    assert main([*argv, "--policies", "static,fairlane-hetero"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    source = tmp_path / "throughputs.csv"
    assert warnings == [
        f"fairlane-eval: warning: no T4 throughput in {source} for 2 of the jobs' 2 job types "
        "(e.g. 'mine'): filled with V100's x 0.43 (the catalogue's relative speed T4 / V100)",
        f"fairlane-eval: warning: no K80 throughput in {source} for 1 of the jobs' 2 job types "
        "(e.g. 'other'): filled with V100's x 0.0966 (the catalogue's relative speed K80 / V100)",
    ]
