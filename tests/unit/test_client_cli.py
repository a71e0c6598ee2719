"""``fairlane run``'s command line: a wrong flag is one line and exit code 2, and so is a
scheduler that does not answer (the job never starts)."""

import os
import shlex
import signal
import socket
import subprocess
import sys

import pytest

from fairlane.cli import parse
from fairlane.launcher import join_line
from fairlane.specs import JobSpec, JoinSpec
from tests.processes import free_port


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "--gpus", "0", "--", "true"], "argument --gpus: must be a whole number from 1"),
        (["run", "--", "true"], "the following arguments are required: --gpus"),
        (["run", "--gpus", "1"], "no command to run"),
        (["run", "--gpus", "1", "--class", "a/b", "--", "true"], "not a job class"),
        (["run", "--gpus", "1", "--lease-s", "-1", "--", "true"], "must be above 0"),
        (["run", "--gpus", "1", "--on-degraded-signal", "SIGNOPE", "--", "x"], "not a signal"),
        (["fly"], "invalid choice: 'fly'"),
    ],
)
def test_a_wrong_command_line_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("fairlane: error: ")
    assert says in err


def test_flags_make_the_request_and_the_command_follows_the_separator() -> None:
    spec = parse(
        ["run", "--gpus", "8", "--nodes", "2", "--class", "compute-bound", "--multi-host",
         "--models", "H100, B200", "--on-degraded-signal", "none", "--",
         "torchrun", "--nproc-per-node", "8", "train.py"]
    )  # fmt: skip
    assert isinstance(spec, JobSpec)
    assert spec.command == ["torchrun", "--nproc-per-node", "8", "train.py"]
    assert spec.multi_host
    assert (spec.request.gpus_per_node, spec.request.nodes) == (8, 2)
    assert spec.request.models == ["H100", "B200"]
    assert spec.request.job_class == spec.job_class == "compute-bound"
    assert spec.request.job_id.startswith("compute-bound-")
    assert spec.request.lease_s == 60.0
    assert spec.degraded_signal is None
    assert parse(["run", "--gpus", "1", "--", "x"]).degraded_signal == signal.SIGUSR1


def test_join_takes_the_placement_and_the_node_and_defaults_to_this_host() -> None:
    spec = parse(["join", "p-1", "--class", "llm", "--", "torchrun", "train.py"])
    assert isinstance(spec, JoinSpec)
    assert (spec.placement_id, spec.node, spec.job_class) == ("p-1", socket.gethostname(), "llm")
    assert parse(["join", "p-1", "--node", "n7", "--", "x"]).node == "n7"  # type: ignore[union-attr]


def test_the_join_line_printed_for_a_node_parses_back_to_that_node_s_run() -> None:
    """``fairlane run --multi-host`` prints it for each other node; the node's host runs it
    as printed, so it must carry the run's flags and command exactly (quoting included)."""
    run = parse(
        ["run", "--gpus", "8", "--nodes", "2", "--class", "llm", "--window-s", "5",
         "--on-degraded-signal", "none", "--master-addr", "10.0.0.1", "--multi-host", "--",
         "sh", "-c", "torchrun --node-rank $NODE_RANK train.py"]
    )  # fmt: skip
    assert isinstance(run, JobSpec)
    line = join_line(run, "p-1", "node-b")
    words = shlex.split(line)
    assert words[:2] == ["fairlane", "join"]
    joined = parse(words[1:])
    assert isinstance(joined, JoinSpec)
    assert (joined.placement_id, joined.node) == ("p-1", "node-b")
    child = ("command", "job_class", "window_s", "grace_s", "degraded_signal", "master_addr")
    assert [getattr(joined, f) for f in child] == [getattr(run, f) for f in child]


def test_an_unreachable_scheduler_is_one_line_and_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fairlane", "run", "--gpus", "1", "--", "true"],
        env={**os.environ, "FAIRLANE_SCHEDULER_URL": f"http://127.0.0.1:{free_port()}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "fairlane: error: the scheduler is not reachable at http://127.0.0.1:"
    )
    assert done.stderr.count("\n") == 1


def test_a_bad_setting_is_one_line_and_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fairlane", "run", "--gpus", "1", "--", "true"],
        env={**os.environ, "FAIRLANE_TOKEN": "a", "FAIRLANE_TOKEN_FILE": "/etc/hostname"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "fairlane: error: invalid settings: give FAIRLANE_TOKEN or FAIRLANE_TOKEN_FILE, not both\n"
    )
