"""MASTER_PORT selection (pure)."""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["next_free_port"]


def next_free_port(used: Collection[int], first: int, last: int) -> int | None:
    """The lowest port in [first, last] not in ``used``, or None when all are taken."""
    for port in range(first, last + 1):
        if port not in used:
            return port
    return None
