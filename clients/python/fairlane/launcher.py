"""``fairlane run``'s orchestration: place, run, renew, report, release; and
``fairlane join``'s: one node of a placement another host's ``fairlane run`` holds.

    place ──► run the children (fairlane.job_run) ──► release (bounded retries), always

With ``--multi-host`` the launcher starts the rank-0 node's child only and prints, for
each other node, the ``fairlane join`` line its host runs. A joiner starts its node's
child, reports its node's ranks and hears the placement's events the same way, but neither
renews nor releases: it reads the placement every few seconds and ends its child when
the placement does (a released placement gives the child ``--grace-s`` to end itself).

Failure behaviour (docs/launcher.md): the scheduler unreachable when placing is one
line and exit code 2; unreachable when releasing is bounded retries, then one line that
says when the lease expires; Kafka away never stops or fails the job.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from collections.abc import Awaitable

from fairlane.client import AsyncClient
from fairlane.errors import ApiError, ClientError, UnreachableError
from fairlane.job_run import JobRun, when
from fairlane.models import Placement
from fairlane.settings import LauncherSettings
from fairlane.specs import JobSpec, JoinSpec

__all__ = ["NOT_PLACED", "join", "join_line", "launch"]

log = logging.getLogger("fairlane.launcher")

#: Exit code when the job never started (no placement, or no node of it to join).
NOT_PLACED = 2


async def _release(api: AsyncClient, placement: Placement, timeout_s: float) -> None:
    """Release, retrying what may pass for ``timeout_s``; else one line, never a raise."""
    deadline = time.monotonic() + timeout_s
    delay_s = 0.5
    while True:
        try:
            await api.release(placement.id)
        except ClientError as exc:
            if exc.retryable and time.monotonic() + delay_s < deadline:
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)
                continue
            log.error(
                "could not release %s (%s); its lease expires at %s",
                placement.id,
                exc,
                when(placement.lease_expires_at_ms),
            )
            return
        log.info("released %s", placement.id)
        return


def _client(settings: LauncherSettings) -> AsyncClient:
    return AsyncClient(
        settings.scheduler_url, settings.bearer_token(), timeout_s=settings.http_timeout_s
    )


async def _answer(
    settings: LauncherSettings, call: Awaitable[Placement], refused: str
) -> Placement | None:
    """The scheduler's answer to ``call``; None after one line saying why there is none."""
    try:
        return await call
    except UnreachableError:
        log.error("the scheduler is not reachable at %s", settings.scheduler_url)
    except ApiError as exc:
        log.error("%s: %s", refused, exc)
    return None


async def launch(settings: LauncherSettings, spec: JobSpec) -> int:
    """Run ``spec`` in a placement; the exit code of ``fairlane run``."""
    async with _client(settings) as api:
        placement = await _answer(settings, api.place(spec.request), "not placed")
        if placement is None:
            return NOT_PLACED
        local = placement.nodes[:1] if spec.multi_host else placement.nodes
        run = JobRun(settings, spec, placement, local, spec.request.lease_s)
        try:
            if placement.state != "placed":
                log.error("not placed: the placement is %s", placement.state)
                return NOT_PLACED
            gpus = "; ".join(
                f"{n.node} [{', '.join(g.uuid for g in n.gpus)}]" for n in placement.nodes
            )
            log.info("placed %s: %s", placement.id, gpus)
            for node in placement.nodes[len(local) :]:
                log.info("on %s: %s", node.node, join_line(spec, placement.id, node.node))
            return await run.run(api, owner=True)
        finally:
            await _release(api, run.placement, settings.release_timeout_s)


def join_line(spec: JobSpec, placement_id: str, node: str) -> str:
    """The ``fairlane join`` command the host of ``node`` runs (its flags as this run's)."""
    words = ["fairlane", "join", placement_id, "--node", node, "--class", spec.job_class]
    words += ["--window-s", f"{spec.window_s:g}", "--grace-s", f"{spec.grace_s:g}"]
    signum = spec.degraded_signal
    words += ["--on-degraded-signal", "none" if signum is None else signum.name]
    if spec.master_addr is not None:
        words += ["--master-addr", spec.master_addr]
    return shlex.join([*words, "--", *spec.command])


async def join(settings: LauncherSettings, spec: JoinSpec) -> int:
    """Run ``spec.node``'s child of a placement another launcher holds; the exit code
    of ``fairlane join``."""
    async with _client(settings) as api:
        refused = f"cannot join {spec.placement_id}"
        placement = await _answer(settings, api.get(spec.placement_id), refused)
        if placement is None:
            return NOT_PLACED
        if placement.state != "placed":
            log.error("cannot join %s: it is %s", placement.id, placement.state)
            return NOT_PLACED
        local = [n for n in placement.nodes if n.node == spec.node]
        if not local:
            names = ", ".join(n.node for n in placement.nodes)
            log.error("%s has no node %s (its nodes: %s)", placement.id, spec.node, names)
            return NOT_PLACED
        log.info("joined %s on %s (node rank %d)", placement.id, spec.node, local[0].node_rank)
        return await JobRun(settings, spec, placement, local, None).run(api, owner=False)
