"""Where samples come from: NVML on a GPU node, dcgm-exporter endpoints, or the simulated
fleet.

``--backend nvml`` insists on NVML (a node without it is a deployment error: one clear
message, exit code 2); ``auto`` falls back to the simulator with a warning; ``sim``
never touches NVML; ``dcgm`` bridges the dcgm-exporters at ``--dcgm-url`` (any number of
nodes from one agent) and never touches NVML either.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import orjson

from fairlane_agent.dcgm import DcgmSource
from fairlane_agent.errors import NvmlUnavailableError
from fairlane_agent.metrics import AgentMetrics
from fairlane_agent.nvml import NvmlCollector, NvmlLib
from fairlane_agent.settings import AgentSettings
from fairlane_events.records import NodeSample
from fairlane_sim.fleet import FleetSimulator

__all__ = ["SampleSource", "open_source"]

log = logging.getLogger("fairlane.agent")


class SampleSource(Protocol):
    def sample(self, ts_ms: int) -> list[NodeSample]:
        """One record per node for the round at ``ts_ms``."""
        ...


@contextlib.contextmanager
def open_source(
    settings: AgentSettings, load_nvml: Callable[[], NvmlLib], metrics: AgentMetrics
) -> Iterator[SampleSource]:
    """The configured source; NVML and HTTP clients are closed on exit.
    Raises NvmlUnavailableError."""
    if settings.backend == "dcgm":
        bridge = DcgmSource(settings.dcgm_url, metrics, timeout_s=settings.dcgm_timeout_s)
        log.info("DCGM bridge: %d dcgm-exporter endpoints", len(bridge.urls))
        try:
            yield bridge
        finally:
            bridge.close()
        return
    if settings.backend != "sim":
        on_error = metrics.nvml_errors.labels
        try:
            collector = NvmlCollector(
                load_nvml(), settings.node_name, lambda kind: on_error(kind).inc()
            )
        except NvmlUnavailableError as exc:
            if settings.backend == "nvml":
                raise
            log.warning("%s; --backend auto falls back to the simulated fleet", exc)
        else:
            log.info("NVML: %d GPUs, driver %s", collector.gpu_count, collector.driver_version)
            try:
                yield collector
            finally:
                collector.close()
            return
    scenario = settings.load_scenario()
    log.info("simulated fleet, scenario %r", scenario.name)
    fleet = FleetSimulator(settings.fleet_spec(scenario), scenario)
    if settings.hidden_speeds_file is not None:
        write_hidden_speeds(fleet, settings.hidden_speeds_file)
    yield fleet


def write_hidden_speeds(fleet: FleetSimulator, path: Path) -> None:
    """The fleet's hidden speeds per job class, as JSON, replaced whole (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(orjson.dumps(fleet.hidden_speeds(), option=orjson.OPT_INDENT_2))
    partial.replace(path)
    log.info("%d slow-but-unthrottled GPUs; hidden speeds in %s", len(fleet.slow), path)
