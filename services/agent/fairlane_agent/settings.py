"""The agent's one settings model (flags and ``FAIRLANE_*`` environment)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from fairlane_agent.core.backlog import BacklogLimits
from fairlane_events.signing import (
    KeyFileError,
    NodeKeySigner,
    RingSigner,
    SampleSigner,
    parse_key_ring,
    parse_node_key,
    read_key_file,
)
from fairlane_runtime.settings import ServiceSettings
from fairlane_sim.fleet import FleetSpec
from fairlane_sim.scenario import Scenario, ScenarioError, parse_scenario, shipped_scenario

__all__ = ["AgentSettings"]


class AgentSettings(ServiceSettings):
    backend: Literal["auto", "nvml", "sim", "dcgm"] = Field(
        "auto",
        description="nvml: real GPUs; sim: simulated fleet; auto: nvml, else sim; "
        "dcgm: bridge from dcgm-exporter endpoints (--dcgm-url)",
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
    slow_fraction: float = Field(
        0.0, ge=0, le=1, description="simulated GPUs slow under --slow-classes, unseen by NVML"
    )
    slow_speed: float = Field(0.5, gt=0, le=1, description="their speed under those classes")
    slow_classes: list[str] = Field(["compute-bound"], description="job classes they are slow at")
    hidden_speeds_file: Path | None = Field(
        None,
        description="write each simulated GPU's hidden speed per job class here (JSON), "
        "for simulated jobs to run at",
    )
    sim_follows_placements: bool = Field(
        True, description="simulated GPUs carry the jobs placed on them (placements topic)"
    )
    # DCGM-exporter bridge
    dcgm_url: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="dcgm-exporter /metrics URLs (backend dcgm); repeat the flag or separate "
        "by commas: one bridge covers many nodes",
    )
    dcgm_timeout_s: float = Field(5.0, gt=0, description="per scrape of one dcgm-exporter")
    # Delivery
    buffer_max_samples: int = Field(100_000, ge=1, description="node samples kept for Kafka")
    buffer_max_age_s: float = Field(3600.0, gt=0, description="older samples are dropped")
    shutdown_flush_s: float = Field(10.0, ge=0, description="flush deadline on SIGTERM")
    kafka_request_timeout_s: float = Field(10.0, gt=0)
    # Node identity (docs/security.md): what signs each record for the scorer to verify
    node_key_file: Path | None = Field(
        None,
        description="this node's own key ('<key id> <node> <hex key>', written by "
        "fairlane-node-key): signs its samples (backend nvml)",
    )
    sample_key_ring_file: Path | None = Field(
        None,
        description="a key ring ('<key id> <secret>' lines): signs samples of any node "
        "with its first secret (the simulated fleet, the DCGM bridge, which speak for "
        "many nodes)",
    )
    # HTTP: /metrics and /healthz
    metrics_port: int = Field(9400, ge=0, le=65535, description="0 disables the HTTP server")
    metrics_bind: str = "127.0.0.1"

    @field_validator("dcgm_url", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        """A JSON list, or URLs separated by commas (``FAIRLANE_DCGM_URL=http://a,http://b``)."""
        if isinstance(value, str):
            text = value.strip()
            parts = json.loads(text) if text.startswith("[") else text.split(",")
            return [p.strip() for p in parts if p.strip()]
        return value

    @field_validator("dcgm_url")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"not an http(s) URL: {url!r}")
        return urls

    @model_validator(mode="after")
    def _dcgm_needs_urls(self) -> AgentSettings:
        if self.backend == "dcgm" and not self.dcgm_url:
            raise ValueError("--backend dcgm needs --dcgm-url (a dcgm-exporter /metrics URL)")
        if self.dcgm_url and self.dcgm_timeout_s > self.interval_s:
            raise ValueError("--dcgm-timeout-s must not exceed --interval-s")
        return self

    @model_validator(mode="after")
    def _one_signing_key(self) -> AgentSettings:
        if self.node_key_file is not None and self.sample_key_ring_file is not None:
            raise ValueError("give node_key_file or sample_key_ring_file, not both")
        if self.node_key_file is not None and self.backend != "nvml":
            raise ValueError(
                "node_key_file signs one node's samples: it needs --backend nvml "
                "(a fleet of many nodes signs with sample_key_ring_file)"
            )
        return self

    def sample_signer(self) -> SampleSigner | None:
        """What signs the samples (reads the key file: call it once, at the entry point);
        None: they go unsigned. Raises KeyFileError."""
        if self.sample_key_ring_file is not None:
            return RingSigner(read_key_file(self.sample_key_ring_file, parse_key_ring))
        if self.node_key_file is None:
            return None
        key = read_key_file(self.node_key_file, parse_node_key)
        if key.node != self.node_name:
            raise KeyFileError(
                f"{self.node_key_file} is node {key.node!r}'s key, this node is {self.node_name!r}"
            )
        return NodeKeySigner(key)

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
            slow_fraction=self.slow_fraction,
            slow_speed=self.slow_speed,
            slow_classes=tuple(self.slow_classes),
        )

    def backlog_limits(self) -> BacklogLimits:
        return BacklogLimits(self.buffer_max_samples, self.buffer_max_age_s)
