"""What ``fairlane run`` and ``fairlane join`` were asked to do (the command line's
result, :func:`fairlane.cli.parse`)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from fairlane.models import PlacementRequest

__all__ = ["ChildSpec", "JobSpec", "JoinSpec"]


@dataclass(frozen=True, kw_only=True)
class ChildSpec:
    """How a node's child runs: the command and what the launcher does around it."""

    command: Sequence[str]
    job_class: str
    window_s: float
    grace_s: float
    degraded_signal: signal.Signals | None
    master_addr: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobSpec(ChildSpec):
    """What ``fairlane run`` was asked to do; ``multi_host``: start the rank-0 node's
    child only, the others join from their hosts."""

    request: PlacementRequest
    multi_host: bool = False


@dataclass(frozen=True, kw_only=True)
class JoinSpec(ChildSpec):
    """What ``fairlane join`` was asked to do: run ``node``'s child of ``placement_id``."""

    placement_id: str
    node: str
