"""Run a Fairlane service as a real child process for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def service(
    module: str, args: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``python -m module args`` with ``env``; SIGTERM it (then SIGKILL) afterwards."""
    proc = spawn(module, args, env, log)
    try:
        yield proc
    finally:
        stop(proc)


def spawn(
    module: str, args: list[str], env: dict[str, str], log: Path, prefix: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """``python -m module args`` with ``env`` added, its output appended to ``log``;
    ``prefix`` runs it under another command (``ip netns exec NAME``, say)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", module, *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_http(
    url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 90
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url} not up after {timeout_s}s:\n{log.read_text()[-3000:]}")


def failed_start(module: str, args: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``python -m module args`` that must refuse to start: its exit code and the
    stderr lines that say "error", after checking that no traceback came with them."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, [line for line in done.stderr.splitlines() if "error" in line.lower()]
