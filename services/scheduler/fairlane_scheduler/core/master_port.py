"""MASTER_PORT selection (pure): the range the scheduler hands out, and which port of it
a placement gets on its master node (the rule ``fairlane_free_port`` keeps in Postgres)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["PortRange", "next_free_port"]


@dataclass(frozen=True)
class PortRange:
    first: int = 29500
    last: int = 29999


def next_free_port(used: Collection[int], ports: PortRange, hint: int | None = None) -> int | None:
    """``hint`` when it is not in ``used``, else the lowest port of ``ports`` not in
    ``used``; None when all are taken."""
    if hint is not None and hint not in used:
        return hint
    for port in range(ports.first, ports.last + 1):
        if port not in used:
            return port
    return None
