"""The job's processes: one per node of the placement, each in a session of its own.

Its own session (and process group) keeps the terminal's Ctrl-C from reaching the job
twice, once from the terminal and once from the launcher: the launcher forwards what it
receives to each child's whole group, so torchrun and its workers get it too.

A launcher killed outright (SIGKILL, the OOM killer) cannot forward anything, so each
child asks Linux to send it SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``): the
job does not run on, on GPUs whose lease nobody renews any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence

__all__ = ["Children", "exit_code"]


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None] | None:
    """What the child runs between fork and exec: SIGTERM when ``parent`` dies, and exit
    at once if it died already. Only a libc call, loaded before the fork. None where
    there is no ``prctl`` (not Linux): there the lease alone bounds an orphaned job."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def exit_code(returncode: int) -> int:
    """A process's exit status as a shell reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class Children:
    def __init__(self, procs: Sequence[asyncio.subprocess.Process]) -> None:
        self.procs = list(procs)

    @classmethod
    async def start(cls, command: Sequence[str], envs: Sequence[Mapping[str, str]]) -> Children:
        procs: list[asyncio.subprocess.Process] = []
        preexec = _die_with(os.getpid())
        try:
            for env in envs:
                procs.append(
                    await asyncio.create_subprocess_exec(
                        *command,
                        env={**os.environ, **env},
                        start_new_session=True,
                        preexec_fn=preexec,  # one libc call: no lock to deadlock on
                    )
                )
        except BaseException:
            started = cls(procs)
            started.signal(signal.SIGKILL)
            await started.wait_all()
            raise
        return cls(procs)

    @property
    def running(self) -> list[asyncio.subprocess.Process]:
        return [p for p in self.procs if p.returncode is None]

    def signal(self, signum: int) -> None:
        """``signum`` to the process group of every child still running."""
        for proc in self.running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)

    async def wait_all(self) -> None:
        await asyncio.gather(*(p.wait() for p in self.procs))

    async def wait_until_done_or_failed(self, stop: asyncio.Event) -> None:
        """Until every child has exited, one has failed, or ``stop`` is set."""
        waits = {asyncio.ensure_future(p.wait()) for p in self.procs}
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while waits:
                done, waits = await asyncio.wait(
                    {*waits, stopped}, return_when=asyncio.FIRST_COMPLETED
                )
                waits.discard(stopped)
                if stopped in done or any(d is not stopped and d.result() != 0 for d in done):
                    return
        finally:
            for task in (*waits, stopped):
                task.cancel()

    async def stop(self, signum: int, grace_s: float) -> None:
        """``signum`` to every group, then SIGKILL to what is still running after ``grace_s``."""
        self.signal(signum)
        try:
            await asyncio.wait_for(self.wait_all(), grace_s)
        except TimeoutError:
            self.signal(signal.SIGKILL)
            await self.wait_all()

    def exit_code(self) -> int:
        """The first failing child's code (128 + N when killed by signal N), else 0."""
        codes = [exit_code(p.returncode) for p in self.procs if p.returncode is not None]
        return next((c for c in codes if c != 0), 0)
