"""``fairlane-agent``: publish node samples of a simulated fleet to Kafka."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence

from prometheus_client import start_http_server

from fairlane_agent.publisher import SamplePublisher
from fairlane_agent.runner import AgentMetrics, run_agent
from fairlane_agent.settings import AgentSettings
from fairlane_runtime.entry import exit_with_error, load_settings
from fairlane_runtime.errors import FairlaneError
from fairlane_runtime.kafka import ensure_topics
from fairlane_runtime.logging import configure_logging
from fairlane_sim.fleet import FleetSimulator

PROG = "fairlane-agent"


async def _run(settings: AgentSettings) -> None:
    await ensure_topics(settings.kafka_bootstrap_servers)
    metrics = AgentMetrics.create()
    if settings.metrics_port:
        start_http_server(settings.metrics_port, settings.metrics_bind, metrics.registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    publisher = SamplePublisher(settings.kafka_bootstrap_servers)
    await publisher.start()
    try:
        await run_agent(
            FleetSimulator(settings.fleet_spec()), publisher, settings.interval_s, metrics, stop
        )
    finally:
        await publisher.stop()


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(AgentSettings, argv, PROG)
    configure_logging(settings.log_level, json=settings.log_json)
    try:
        asyncio.run(_run(settings))
    except FairlaneError as exc:
        exit_with_error(PROG, exc)
    except ValueError as exc:  # an invalid fleet spec
        exit_with_error(PROG, exc)


if __name__ == "__main__":
    main()
