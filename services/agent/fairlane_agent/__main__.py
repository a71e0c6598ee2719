"""``fairlane-agent``: sample GPUs (NVML, dcgm-exporter or a simulated fleet) and publish
them to Kafka.

The composition root: settings, source, metrics, HTTP server, delivery and the
collection loop are built here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from fairlane_agent.core.backlog import Backlog
from fairlane_agent.delivery import Delivery
from fairlane_agent.http import HealthCheck, make_http_app, start_http
from fairlane_agent.metrics import AgentMetrics
from fairlane_agent.nvml import NvmlLib
from fairlane_agent.placements import follow_placements
from fairlane_agent.publisher import SamplePublisher
from fairlane_agent.runner import run_collection
from fairlane_agent.settings import AgentSettings
from fairlane_agent.sources import open_source
from fairlane_runtime.entry import exit_with_error, load_settings
from fairlane_runtime.errors import FairlaneError
from fairlane_runtime.kafka import ensure_topics
from fairlane_runtime.logging import configure_logging
from fairlane_sim.fleet import FleetSimulator

PROG = "fairlane-agent"
log = logging.getLogger("fairlane.agent")


def _import_pynvml() -> NvmlLib:
    import pynvml

    return pynvml


def _health(settings: AgentSettings, delivery: Delivery) -> HealthCheck:
    def check() -> tuple[bool, dict[str, Any]]:
        age_s = time.monotonic() - delivery.last_round_monotonic
        details = {
            "backend": settings.backend,
            "last_round_age_s": round(age_s, 1),
            "kafka": "connected" if delivery.connected else "unreachable",
            "backlog": delivery.pending,
        }
        return age_s <= 3 * settings.interval_s + 10, details  # 10 s: a slow first round

    return check


async def run(
    settings: AgentSettings, load_nvml: Callable[[], NvmlLib], stop: asyncio.Event
) -> None:
    """The agent, until ``stop`` is set; then the backlog is flushed within the deadline."""
    metrics = AgentMetrics.create()
    async with contextlib.AsyncExitStack() as stack:
        source = stack.enter_context(open_source(settings, load_nvml, metrics))
        security = settings.kafka_security()
        signer = settings.sample_signer()
        if signer is None:
            log.warning("samples go unsigned: a scorer that verifies node identity refuses them")
        await ensure_topics(settings.kafka_bootstrap_servers, security=security)
        publisher = SamplePublisher(
            settings.kafka_bootstrap_servers,
            security=security,
            request_timeout_s=settings.kafka_request_timeout_s,
            signer=signer,
        )
        await publisher.start()
        stack.push_async_callback(publisher.stop)
        delivery = Delivery(
            Backlog(settings.backlog_limits()),
            publisher,
            metrics,
            stall_s=settings.kafka_request_timeout_s,
        )
        if settings.metrics_port:
            app = make_http_app(metrics.registry, _health(settings, delivery))
            http = await start_http(app, settings.metrics_bind, settings.metrics_port)
            stack.push_async_callback(http.cleanup)
        if settings.sim_follows_placements and isinstance(source, FleetSimulator):
            following = asyncio.create_task(
                follow_placements(
                    settings.kafka_bootstrap_servers, source, metrics, stop, security=security
                )
            )
            following.add_done_callback(lambda _: stop.set())  # it ends only with stop
            stack.push_async_callback(_finish, following)
        sending = asyncio.create_task(delivery.run(stop))
        # A sending loop that dies must stop the agent (and surface its error), not leave
        # it sampling into a backlog nobody sends.
        sending.add_done_callback(lambda _: stop.set())
        await run_collection(source, delivery, settings.interval_s, metrics, stop=stop)
        await _shut_down(sending, delivery, settings.shutdown_flush_s)


async def _run_until_signalled(settings: AgentSettings, load_nvml: Callable[[], NvmlLib]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await run(settings, load_nvml, stop)


async def _finish(task: asyncio.Task[None]) -> None:
    """Wait for a task that ends with ``stop`` (raising what it raised); cancel it if it
    is stuck in I/O."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _shut_down(sending: asyncio.Task[None], delivery: Delivery, deadline_s: float) -> None:
    """Let the batch in flight finish, then flush the backlog, all within ``deadline_s``."""
    end = time.monotonic() + deadline_s
    await asyncio.wait({sending}, timeout=deadline_s)
    if not sending.done():
        sending.cancel()  # its batch goes back to the backlog
        await asyncio.gather(sending, return_exceptions=True)
    await delivery.flush(max(0.0, end - time.monotonic()))


def main(
    argv: Sequence[str] | None = None, load_nvml: Callable[[], NvmlLib] = _import_pynvml
) -> None:
    settings = load_settings(AgentSettings, argv, PROG)
    configure_logging(settings.log_level, json=settings.log_json)
    # aiokafka logs every reconnection attempt (10 a second during an outage); the
    # delivery loop reports an outage itself, once when it starts and once when it ends.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    # httpx logs every request at INFO: one line per exporter per round for the DCGM
    # bridge, which reports failures itself.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        asyncio.run(_run_until_signalled(settings, load_nvml))
    except FairlaneError as exc:
        exit_with_error(PROG, exc)
    except ValueError as exc:  # an invalid fleet spec
        exit_with_error(PROG, exc)


if __name__ == "__main__":
    main()
