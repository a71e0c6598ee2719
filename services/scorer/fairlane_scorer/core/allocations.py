"""Fairlane's allocations per node, as the scorer's table keeps them (pure).

The value of the ``node-allocations`` table for one node: ``{placement_id: {"start": ms,
"end": ms | None, "gpus": [uuid, ...], "shares": {uuid: [share, memory_mib | None]}}}``;
``shares`` names the GPUs the placement holds a share of (issue 29; absent in rows
written before it: whole GPUs). Placement events arrive on their own topic, re-keyed by
node, so they are co-partitioned with the samples of that node.
"""

from __future__ import annotations

from typing import Any

from fairlane_events.records import PlacementEvent
from fairlane_scoring.allocation import Allocation

__all__ = ["ENDING_EVENTS", "NodeAllocations", "allocations_of", "apply_placement"]

NodeAllocations = dict[str, dict[str, Any]]

#: Lifecycle events after which the placement no longer holds its GPUs.
ENDING_EVENTS = frozenset({"released", "expired", "failed"})


def apply_placement(
    state: NodeAllocations, node: str, event: PlacementEvent, history_s: float
) -> NodeAllocations:
    """The node's allocations after ``event``: created starts one, released/expired/failed
    end it (redelivery is harmless), pending changes nothing. Ended placements older than
    the history window are dropped: no sample they could mask still counts."""
    slots = [g for a in event.nodes if a.node == node for g in a.gpus]
    gpus = [g.uuid for g in slots]
    shares = {g.uuid: [g.share, g.memory_mib] for g in slots if g.share is not None}
    current = dict(state)
    entry = current.get(event.placement_id)
    if event.event == "created":
        start = event.ts_ms if entry is None else min(entry["start"], event.ts_ms)
        end = None if entry is None else entry["end"]
        current[event.placement_id] = {"start": start, "end": end, "gpus": gpus, "shares": shares}
    elif event.event in ENDING_EVENTS:
        start = event.ts_ms if entry is None else entry["start"]
        if not gpus and entry is not None:
            gpus, shares = entry["gpus"], entry.get("shares", {})
        current[event.placement_id] = {
            "start": start,
            "end": event.ts_ms,
            "gpus": gpus,
            "shares": shares,
        }
    horizon = event.ts_ms - history_s * 1000
    return {pid: e for pid, e in current.items() if e["end"] is None or e["end"] >= horizon}


def allocations_of(state: NodeAllocations | None, uuid: str) -> list[Allocation]:
    """The allocation intervals of one GPU of the node, with their share of it."""
    if not state:
        return []
    return [
        Allocation(e["start"], e["end"], *e.get("shares", {}).get(uuid, (None, None)))
        for e in state.values()
        if uuid in e["gpus"]
    ]
