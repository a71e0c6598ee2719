"""A rank's timed sections reach its launcher's socket; without a launcher, nothing
happens but one warning; the degraded file and signal reach only processes that handle it."""

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairlane import progress
from fairlane._wire import StepSample, decode_step
from fairlane.degraded import notify_handlers, read_slow_gpus, write_degraded
from fairlane.progress import Reporter
from fairlane_events.records import PlacementEvent, SlowGpu


@pytest.fixture
def launcher_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "p.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        yield path, sock


def test_a_timed_step_reaches_the_launcher(launcher_socket: tuple[str, socket.socket]) -> None:
    path, sock = launcher_socket
    env = {"FAIRLANE_PROGRESS_SOCKET": path, "NODE_RANK": "1", "LOCAL_RANK": "3", "RANK": "7"}
    reporter = Reporter.from_env(env)
    with reporter.step():
        time.sleep(0.01)
    sample = decode_step(sock.recv(512))
    assert sample is not None
    assert (sample.node_rank, sample.local_rank, sample.rank, sample.steps) == (1, 3, 7, 1)
    assert 0.01 <= sample.compute_s < 1
    reporter.close()


def test_a_time_measured_elsewhere_is_one_step(
    launcher_socket: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sock = launcher_socket
    monkeypatch.setenv("FAIRLANE_PROGRESS_SOCKET", path)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(progress, "_default", None)
    with progress.step(0.25):
        pass
    assert decode_step(sock.recv(512)) == StepSample(0, 0, None, 0.25)


def test_a_section_that_raises_is_not_reported(
    launcher_socket: tuple[str, socket.socket],
) -> None:
    path, _ = launcher_socket
    reporter = Reporter(path)
    with pytest.raises(ZeroDivisionError), reporter.step():
        _ = 1 / 0
    assert reporter.sent == 0


def test_a_launcher_gone_loses_the_step_quietly(tmp_path: Path) -> None:
    reporter = Reporter(str(tmp_path / "nobody.sock"))
    with reporter.step():
        pass
    assert (reporter.sent, reporter.lost) == (0, 1)


def test_without_a_launcher_step_is_a_no_op_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("FAIRLANE_PROGRESS_SOCKET", raising=False)
    monkeypatch.setattr(progress, "_default", None)
    with caplog.at_level(logging.WARNING, "fairlane.progress"):
        for _ in range(3):
            with progress.step():
                pass
    assert [r.getMessage() for r in caplog.records] == [
        "fairlane.progress: no launcher (FAIRLANE_PROGRESS_SOCKET is not set): "
        "steps are not reported"
    ]


def degraded_event() -> PlacementEvent:
    return PlacementEvent(
        schema_="placement/1",
        placement_id="p1",
        job_id="j",
        namespace="default",
        event="degraded",
        ts_ms=1_000,
        nodes=[],
        slow_gpus=[SlowGpu(uuid="G0-1", node="n0", speed=0.6, source="learned")],
    )


def test_the_degraded_file_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "degraded.json"
    monkeypatch.setenv("FAIRLANE_DEGRADED_FILE", str(path))
    assert read_slow_gpus() == []
    write_degraded(path, degraded_event())
    assert read_slow_gpus() == degraded_event().slow_gpus
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


_HANDLES = """
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: (print("got it", flush=True), sys.exit(0)))
print("ready", flush=True)
time.sleep(30)
"""


def test_the_signal_goes_to_handlers_only(tmp_path: Path) -> None:
    """A parent that does not handle SIGUSR1 (torchrun) survives; its child that does
    (a worker) gets it."""
    parent_code = (
        "import subprocess, sys; "
        f"subprocess.run([sys.executable, '-c', {_HANDLES!r}]); "
        "print('parent survived', flush=True)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == "ready\n"
        sent = notify_handlers(parent.pid, signal.SIGUSR1)
        assert len(sent) == 1
        assert parent.pid not in sent
        assert parent.stdout.read() == "got it\nparent survived\n"
        assert parent.wait(10) == 0
    finally:
        if parent.poll() is None:
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait()
