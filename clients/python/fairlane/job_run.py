"""One placed job's children on this host, from their start to their end.

    start one child per local node ──► wait: all exited | one failed | signal | lease lost
      │ progress socket ──► window ──► fairlane.job-progress.v1 (best effort)
      │ placements topic ──► degraded ──► file + signal to the job
      │                  └──► idle ──► a warning (and the lease's new end)
      └ the owner renews every lease/3; a joiner reads the placement every FOLLOW_S

What starts it, places and releases is :mod:`fairlane.launcher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import signal
import socket
import tempfile
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path

from fairlane.aggregate import ProgressWindow
from fairlane.children import Children
from fairlane.client import AsyncClient
from fairlane.degraded import notify_handlers, write_degraded
from fairlane.env import node_env
from fairlane.errors import ClientError
from fairlane.kafka_io import PlacementWatcher, ProgressPublisher
from fairlane.models import Placement
from fairlane.settings import LauncherSettings
from fairlane.specs import ChildSpec
from fairlane_events.records import NodeAssignment, PlacementEvent

__all__ = ["FOLLOW_S", "JobRun", "when"]

log = logging.getLogger("fairlane.launcher")

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_WATCHER_READY_S = 10.0
#: A shell's exit codes for a command it cannot run.
_CANNOT_EXECUTE: dict[type[OSError], int] = {FileNotFoundError: 127, PermissionError: 126}
_FLUSH_S = 5.0
#: How often a joiner reads its placement, to end its child when the placement ends.
FOLLOW_S = 2.0


def when(ms: int | None) -> str:
    """An epoch-ms time as UTC ISO 8601, or what no lease means."""
    if ms is None:
        return "never (no lease)"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="seconds")


class _Receiver(asyncio.DatagramProtocol):
    """The ranks' datagrams into the window."""

    def __init__(self, window: ProgressWindow) -> None:
        self.window = window

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.window.add_datagram(data)


class JobRun:
    """One placed job's children on this host (``local``, nodes of ``placement``), from
    their start to their end. ``lease_s``: renew it every third (the placement is this
    launcher's); None: follow the placement instead (a joiner)."""

    def __init__(
        self,
        settings: LauncherSettings,
        spec: ChildSpec,
        placement: Placement,
        local: Sequence[NodeAssignment],
        lease_s: float | None,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.placement = placement
        self.local = local
        self.lease_s = lease_s
        self.stop = asyncio.Event()
        self.stopped_by: signal.Signals | None = None
        self.lease_lost = False
        self.children = Children(())
        self.degraded_file = Path()
        self.window_started = time.monotonic()

    def on_signal(self, signum: signal.Signals) -> None:
        if self.stopped_by is not None:  # a second Ctrl-C: no more grace
            log.warning("%s again: killing the job", signum.name)
            self.children.signal(signal.SIGKILL)
            return
        log.warning("%s: stopping the job (grace %.0f s)", signum.name, self.spec.grace_s)
        self.stopped_by = signum
        self.stop.set()

    def on_event(self, event: PlacementEvent) -> None:
        if event.event == "idle":
            self.on_idle(event)
        else:
            self.on_degraded(event)

    def on_idle(self, event: PlacementEvent) -> None:
        since = when(event.idle_since_ms)
        if event.lease_expires_ms is None:
            then = "nothing is released unless its namespace's idle policy says so"
        else:
            then = f"its namespace's idle policy ends the lease at {when(event.lease_expires_ms)}"
        log.warning(
            "placement %s idle since %s (its GPUs near-idle); %s", event.placement_id, since, then
        )

    def on_degraded(self, event: PlacementEvent) -> None:
        slow = ", ".join(
            f"{g.uuid} on {g.node} at {g.speed:.2f} ({g.source})" for g in event.slow_gpus or ()
        )
        log.warning("placement %s degraded: %s", event.placement_id, slow)
        write_degraded(self.degraded_file, event)
        signum = self.spec.degraded_signal
        if signum is None:
            return
        pids = [pid for p in self.children.running for pid in notify_handlers(p.pid, signum)]
        if not pids:
            log.warning("no process of the job handles %s; see %s", signum.name, self.degraded_file)

    async def keep_forever(self, api: AsyncClient, owner: bool) -> None:
        """The owner renews the lease; a joiner follows the placement."""
        if not owner:
            await self.follow_forever(api)
        elif self.lease_s is not None:
            await self.renew_forever(api, self.lease_s)

    async def follow_forever(self, api: AsyncClient) -> None:
        """Every :data:`FOLLOW_S`, until the placement ends: then stop the job (a
        released one first gets the grace to end by itself, as its other nodes do)."""
        while True:
            await asyncio.sleep(FOLLOW_S)
            state: str
            try:
                state = (await api.get(self.placement.id)).state
            except ClientError as exc:
                if exc.retryable:  # the scheduler away: the job goes on
                    continue
                state = f"gone ({exc})"
            if state == "placed":
                continue
            if state == "released":
                log.info("%s was released: its job ends", self.placement.id)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.children.wait_all(), self.spec.grace_s)
            else:
                log.error("%s is %s: stopping the job", self.placement.id, state)
                self.lease_lost = True
            self.stop.set()
            return

    async def renew_forever(self, api: AsyncClient, lease_s: float) -> None:
        """Every third of the lease (every 2 s while the scheduler does not answer)."""
        every_s = max(lease_s / 3, 0.5)
        failing = False
        while True:
            await asyncio.sleep(min(every_s, 2.0) if failing else every_s)
            try:
                self.placement = await api.renew(self.placement.id)
            except ClientError as exc:
                if not exc.retryable:  # 404, 409 not_live: the GPUs may be another's now
                    log.error(
                        "the lease of %s is lost (%s): stopping the job", self.placement.id, exc
                    )
                    self.lease_lost = True
                    self.stop.set()
                    return
                if not failing:
                    log.warning(
                        "cannot renew %s (%s); retrying, its lease expires at %s",
                        self.placement.id,
                        exc,
                        when(self.placement.lease_expires_at_ms),
                    )
                failing = True
                continue
            if failing:
                log.warning("renewed %s again", self.placement.id)
            failing = False

    async def report_forever(self, window: ProgressWindow, publisher: ProgressPublisher) -> None:
        while True:
            await asyncio.sleep(self.spec.window_s)
            self.close_window(window, publisher)

    def close_window(self, window: ProgressWindow, publisher: ProgressPublisher) -> None:
        """The window since the last one closed, as one record offered to Kafka."""
        now = time.monotonic()
        window_s, self.window_started = now - self.window_started, now
        record = window.close(
            placement_id=self.placement.id,
            job_class=self.spec.job_class,
            end_ms=int(time.time() * 1000),
            window_s=window_s,
        )
        if record is not None:
            publisher.offer(record)

    async def run(self, api: AsyncClient, *, owner: bool) -> int:
        """The job's exit code, once its children are gone and its progress sent;
        ``owner``: the placement is this launcher's (renewed here), else joined."""
        settings, placement = self.settings, self.placement
        security = settings.kafka_security()
        bootstrap = settings.kafka_bootstrap_servers
        window = ProgressWindow(placement.nodes)
        publisher = ProgressPublisher(
            bootstrap, security, buffer=settings.progress_buffer, retry_s=settings.kafka_retry_s
        )
        watcher = PlacementWatcher(
            bootstrap, security, placement.id, self.on_event, retry_s=settings.kafka_retry_s
        )
        loop = asyncio.get_running_loop()
        with tempfile.TemporaryDirectory(prefix="fairlane-") as tmp:
            sock_path = str(Path(tmp) / "progress.sock")
            self.degraded_file = Path(tmp) / "degraded.json"
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _Receiver(window), family=socket.AF_UNIX, local_addr=sock_path
            )
            publishing = asyncio.create_task(publisher.run(), name="progress publisher")
            watching = asyncio.create_task(watcher.run(), name="degraded watcher")
            renewing = asyncio.create_task(
                self.keep_forever(api, owner), name="lease renewal" if owner else "placement"
            )
            reporting = asyncio.create_task(
                self.report_forever(window, publisher), name="progress windows"
            )
            for signum in _FORWARDED:
                loop.add_signal_handler(signum, self.on_signal, signum)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        _first(watcher.settled.wait(), self.stop.wait()), _WATCHER_READY_S
                    )
                code = await self._run_children(sock_path)
            finally:
                for signum in _FORWARDED:
                    loop.remove_signal_handler(signum)
                await self.children.stop(signal.SIGKILL, 0)  # whatever an error left running
                self.close_window(window, publisher)
                watching.cancel()
                reporting.cancel()  # its last window is closed above
                # The lease is still renewed while the last records go out.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(publisher.drained(), _FLUSH_S)
                publishing.cancel()
                renewing.cancel()
                tasks = (publishing, watching, renewing, reporting)
                for task, outcome in zip(
                    tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True
                ):
                    if isinstance(outcome, Exception):  # a bug: said, never the job's failure
                        log.error("the %s failed: %r", task.get_name(), outcome)
                await publisher.close()
                transport.close()
                self._summary(window, publisher)
        return 1 if self.lease_lost and code == 0 else code

    async def _run_children(self, sock_path: str) -> int:
        """Start one child per node, wait for the end (or a stop), stop what is left: the
        children's exit code, or a shell's for a command that cannot be run."""
        spec, placement = self.spec, self.placement
        envs = [
            node_env(
                placement.id,
                placement.nodes,
                node,
                job_class=spec.job_class,
                progress_socket=sock_path,
                degraded_file=str(self.degraded_file),
                master_addr=spec.master_addr,
            )
            for node in self.local
        ]
        if self.stop.is_set():
            return 128 + (self.stopped_by or signal.SIGTERM)
        try:
            self.children = await Children.start(spec.command, envs)
        except OSError as exc:  # no such command, not executable: as a shell says it
            log.error("cannot run %s: %s", spec.command[0], exc.strerror or exc)
            return _CANNOT_EXECUTE.get(type(exc), 126)
        await self.children.wait_until_done_or_failed(self.stop)
        await self.children.stop(self.stopped_by or signal.SIGTERM, spec.grace_s)
        return self.children.exit_code()

    def _summary(self, window: ProgressWindow, publisher: ProgressPublisher) -> None:
        log.info(
            "progress: %d records published, %d dropped, %d unsent, %d steps not placed",
            publisher.sent,
            publisher.dropped,
            publisher.backlog,
            window.dropped,
        )
        if publisher.dropped or publisher.backlog:
            log.warning(
                "progress: %d records were not published (Kafka away)",
                publisher.dropped + publisher.backlog,
            )


async def _first(*waits: Coroutine[object, object, object]) -> None:
    """Until the first of ``waits`` is done (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
