"""The agent's one settings model (flags and ``FAIRLANE_*`` environment)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from fairlane_agent.core.backlog import BacklogLimits
from fairlane_runtime.settings import ServiceSettings
from fairlane_sim.fleet import FleetSpec
from fairlane_sim.scenario import Scenario, ScenarioError, parse_scenario, shipped_scenario

__all__ = ["AgentSettings"]


class AgentSettings(ServiceSettings):
    backend: Literal["auto", "nvml", "sim"] = Field(
        "auto", description="nvml: real GPUs; sim: simulated fleet; auto: nvml, else sim"
    )
    node_name: str = Field(
        default_factory=socket.gethostname, description="node name in nvml records"
    )
    interval_s: float = Field(30.0, gt=0, description="collection interval")
    # Simulated fleet
    nodes: int = Field(4, ge=1, le=100_000, description="simulated nodes")
    gpus_per_node: int = Field(8, ge=1, le=64)
    models: list[str] = Field(["A100-80GB", "H100", "V100"], description="GPU models, per node")
    degraded_fraction: float = Field(0.05, ge=0, le=1)
    seed: int = 0
    node_prefix: str = "sim-node"
    scenario: str | None = Field(
        None,
        description="simulator scenario: a TOML file, or a shipped one "
        "(calm, hot-aisle, noisy-tenant, failing-gpu)",
    )
    sim_follows_placements: bool = Field(
        True, description="simulated GPUs carry the jobs placed on them (placements topic)"
    )
    # Delivery
    buffer_max_samples: int = Field(100_000, ge=1, description="node samples kept for Kafka")
    buffer_max_age_s: float = Field(3600.0, gt=0, description="older samples are dropped")
    shutdown_flush_s: float = Field(10.0, ge=0, description="flush deadline on SIGTERM")
    kafka_request_timeout_s: float = Field(10.0, gt=0)
    # HTTP: /metrics and /healthz
    metrics_port: int = Field(9400, ge=0, le=65535, description="0 disables the HTTP server")
    metrics_bind: str = "127.0.0.1"

    def load_scenario(self) -> Scenario:
        """The scenario asked for (none: a calm fleet); ScenarioError says what is wrong."""
        if self.scenario is None:
            return Scenario()
        path = Path(self.scenario)
        if path.is_file():
            return parse_scenario(path.read_text())
        if path.suffix == ".toml":
            raise ScenarioError(f"scenario file not found: {path}")
        return shipped_scenario(self.scenario)

    def fleet_spec(self, scenario: Scenario | None = None) -> FleetSpec:
        """The fleet: flags and environment first, then the scenario's [fleet], then defaults."""
        values: dict[str, Any] = {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "models": self.models,
            "degraded_fraction": self.degraded_fraction,
        }
        for key, value in (scenario.fleet if scenario else {}).items():
            if key not in self.model_fields_set:
                values[key] = value
        return FleetSpec(
            nodes=int(values["nodes"]),
            gpus_per_node=int(values["gpus_per_node"]),
            models=tuple(values["models"]),
            degraded_fraction=float(values["degraded_fraction"]),
            seed=self.seed,
            node_prefix=self.node_prefix,
        )

    def backlog_limits(self) -> BacklogLimits:
        return BacklogLimits(self.buffer_max_samples, self.buffer_max_age_s)
