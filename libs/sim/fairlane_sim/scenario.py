"""Scenarios: what happens to a simulated fleet, and when, as a TOML file.

The format (every key optional except ``kind``; times in seconds since the first
sample; docs/agent.md has the full reference)::

    name = "hot aisle"
    [fleet]                     # defaults for the agent's --nodes/--models/... flags
    nodes = 8
    gpus_per_node = 8
    models = ["H100", "A100-80GB"]

    [[events]]
    kind = "thermal"            # thermal | power_cap | noisy_neighbour | spike | ecc |
                                # silent | job
    start_s = 60
    duration_s = 600            # absent: until the end
    nodes = [0, 1]              # node indices; absent: every node
    gpus = [0, 1, 2, 3]         # GPU indices on those nodes; absent: every GPU
    fraction = 1.0              # of the GPUs selected above (of nodes for "silent"),
                                # chosen with the fleet seed
    # kind-specific: clock_factor, ramp_s (thermal); limit_fraction (power_cap);
    # share (noisy_neighbour); probability (spike); errors (ecc)

Parsing is pure (text in, frozen values out); reading the file is the caller's job.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any, Literal, get_args

from fairlane_sim.errors import ScenarioError

__all__ = [
    "SHIPPED",
    "EventKind",
    "Scenario",
    "ScenarioError",
    "ScenarioEvent",
    "parse_scenario",
    "shipped_scenario",
]

EventKind = Literal["thermal", "power_cap", "noisy_neighbour", "spike", "ecc", "silent", "job"]


@dataclass(frozen=True)
class ScenarioEvent:
    kind: EventKind
    start_s: float = 0.0
    duration_s: float | None = None
    nodes: tuple[int, ...] | None = None
    gpus: tuple[int, ...] | None = None
    fraction: float = 1.0
    clock_factor: float = 0.55  # thermal: SM clock while throttled, x max
    ramp_s: float = 60.0  # thermal, job: heating (and cooling) time
    limit_fraction: float = 0.6  # power_cap: enforced limit, x default limit
    share: float = 0.5  # noisy_neighbour: fraction of the GPU the other tenant takes
    job_share: float = 1.0  # job: the share of the GPU it holds (1: whole; issue 29)
    probability: float = 0.02  # spike: chance per GPU per sample
    errors: int = 1  # ecc: new uncorrected errors at start_s

    def __post_init__(self) -> None:
        if self.kind not in get_args(EventKind):
            raise ScenarioError(f"unknown event kind {self.kind!r}")
        checks = {
            "start_s": self.start_s >= 0,
            "duration_s": self.duration_s is None or self.duration_s > 0,
            "fraction": 0 < self.fraction <= 1,
            "clock_factor": 0 < self.clock_factor <= 1,
            "ramp_s": self.ramp_s >= 0,
            "limit_fraction": 0 < self.limit_fraction <= 1,
            "share": 0 < self.share < 1,
            "job_share": 0 < self.job_share <= 1,
            "probability": 0 <= self.probability <= 1,
            "errors": self.errors >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ScenarioError(f"{self.kind} event: out of range: {', '.join(bad)}")

    def is_active(self, elapsed_s: float) -> bool:
        end = None if self.duration_s is None else self.start_s + self.duration_s
        return self.start_s <= elapsed_s and (end is None or elapsed_s < end)


@dataclass(frozen=True)
class Scenario:
    name: str = "calm"
    fleet: dict[str, Any] = field(default_factory=dict)  # FleetSpec field defaults
    events: tuple[ScenarioEvent, ...] = ()


_EVENT_KEYS = {f.name for f in fields(ScenarioEvent)}
_FLEET_KEYS = {"nodes", "gpus_per_node", "models", "degraded_fraction"}


def parse_scenario(text: str) -> Scenario:
    """A :class:`Scenario` from TOML text, or :class:`ScenarioError` saying what is wrong."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"not TOML: {exc}") from exc
    unknown = set(raw) - {"name", "fleet", "events"}
    fleet = raw.get("fleet", {})
    unknown |= {f"fleet.{k}" for k in set(fleet) - _FLEET_KEYS}
    events = []
    for i, entry in enumerate(raw.get("events", [])):
        unknown |= {f"events[{i}].{k}" for k in set(entry) - _EVENT_KEYS}
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()
        }
        if "kind" not in values:
            raise ScenarioError(f"events[{i}]: missing kind")
        try:
            events.append(ScenarioEvent(**{k: v for k, v in values.items() if k in _EVENT_KEYS}))
        except TypeError as exc:
            raise ScenarioError(f"events[{i}]: {exc}") from exc
    if unknown:
        raise ScenarioError(f"unknown keys: {', '.join(sorted(unknown))}")
    return Scenario(name=str(raw.get("name", "unnamed")), fleet=dict(fleet), events=tuple(events))


#: Scenarios shipped with the simulator (``fairlane_sim/scenarios/<name>.toml``).
SHIPPED = ("calm", "hot-aisle", "noisy-tenant", "failing-gpu")


def shipped_scenario(name: str) -> Scenario:
    """A shipped scenario by name (see :data:`SHIPPED`)."""
    if name not in SHIPPED:
        raise ScenarioError(f"no shipped scenario {name!r}; shipped: {', '.join(SHIPPED)}")
    return parse_scenario(
        resources.files("fairlane_sim").joinpath("scenarios", f"{name}.toml").read_text()
    )
