"""In-process progress reporting: time the compute-only section of each step.

    import fairlane.progress

    for batch in loader:
        with fairlane.progress.step():        # forward + backward, no collective waits
            loss = model(batch).backward()
        optimizer.step()                      # all-reduce etc. outside the section

Each timed section goes to the job's launcher (``fairlane run``) as one datagram on the
UNIX socket named by ``FAIRLANE_PROGRESS_SOCKET``; the launcher turns them into one
``JobProgress`` record per window. Without a launcher, :func:`step` still times nothing
worth paying for: it is a no-op after one warning. Sending never blocks and never
raises: a launcher that went away or a full socket buffer loses that step, counted in
:attr:`Reporter.lost`.

The rank is read from the environment torchrun and the launcher set (``NODE_RANK``,
``LOCAL_RANK``, ``RANK``); a process that runs several ranks (threads) makes one
:class:`Reporter` per rank with ``local_rank=``. A time measured some other way (CUDA
events, a profiler) is reported with ``fairlane.progress.step(compute_s)``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

from fairlane._wire import StepSample, encode_step
from fairlane.env import PROGRESS_SOCKET

__all__ = ["Reporter", "report", "step"]

log = logging.getLogger("fairlane.progress")


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "")
    return int(value) if value.isdigit() else None


class Reporter:
    """One rank's channel to its launcher (or nowhere, when there is none)."""

    def __init__(
        self,
        socket_path: str | None,
        *,
        node_rank: int = 0,
        local_rank: int | None = None,
        rank: int | None = None,
    ) -> None:
        self._path = socket_path
        self._node_rank = node_rank
        self._local_rank = local_rank
        self._rank = rank
        self._sock: socket.socket | None = None
        self.sent = 0
        self.lost = 0
        if socket_path:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, local_rank: int | None = None
    ) -> Reporter:
        """The reporter of this process's rank (``local_rank`` overrides ``LOCAL_RANK``)."""
        env = os.environ if environ is None else environ
        local = local_rank if local_rank is not None else _int(env, "LOCAL_RANK")
        return cls(
            env.get(PROGRESS_SOCKET) or None,
            node_rank=_int(env, "NODE_RANK") or 0,
            local_rank=local,
            rank=_int(env, "RANK") if local_rank is None else None,
        )

    @property
    def is_connected(self) -> bool:
        """Whether a launcher's socket was given (not whether it still listens)."""
        return self._sock is not None

    def report(self, compute_s: float, steps: int = 1) -> None:
        """Send ``steps`` steps of ``compute_s`` compute-only seconds each to the launcher."""
        if self._sock is None or self._path is None:
            return
        sample = StepSample(self._node_rank, self._local_rank, self._rank, compute_s, steps)
        try:
            self._sock.sendto(encode_step(sample), self._path)
        except OSError:  # launcher gone, or its buffer full: this step is lost
            self.lost += 1
        else:
            self.sent += 1

    @contextmanager
    def step(self) -> Iterator[None]:
        """Time the section inside; a section that raises is not reported."""
        if self._sock is None:
            yield
            return
        start = time.perf_counter()
        yield
        self.report(time.perf_counter() - start)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


_default: Reporter | None = None
_default_lock = threading.Lock()


def _reporter() -> Reporter:
    """The process's reporter, built from the environment at first use (not at import)."""
    global _default  # noqa: PLW0603 - one channel per process, made lazily
    with _default_lock:
        if _default is None:
            _default = Reporter.from_env()
            if not _default.is_connected:
                log.warning(
                    "fairlane.progress: no launcher (%s is not set): steps are not reported",
                    PROGRESS_SOCKET,
                )
        return _default


def step(compute_s: float | None = None) -> AbstractContextManager[None]:
    """Time one step's compute-only section: ``with fairlane.progress.step(): ...``; or,
    given ``compute_s``, report one step of that many seconds measured elsewhere (the
    result is then an empty context, so ``with step(t):`` works too)."""
    reporter = _reporter()
    if compute_s is None:
        return reporter.step()
    reporter.report(compute_s)
    return nullcontext()


def report(compute_s: float, steps: int = 1) -> None:
    """Report ``steps`` steps' compute-only seconds each, measured some other way
    (fairlane.nvrx)."""
    _reporter().report(compute_s, steps)
