"""Fairlane's allocations per node, as the scorer's table keeps them (pure).

The value of the ``node-allocations`` table for one node: ``{placement_id: {"start": ms,
"end": ms | None, "gpus": [uuid, ...]}}``. Placement events arrive on their own topic,
re-keyed by node, so they are co-partitioned with the samples of that node.
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
    gpus = [g.uuid for a in event.nodes if a.node == node for g in a.gpus]
    current = dict(state)
    entry = current.get(event.placement_id)
    if event.event == "created":
        start = event.ts_ms if entry is None else min(entry["start"], event.ts_ms)
        end = None if entry is None else entry["end"]
        current[event.placement_id] = {"start": start, "end": end, "gpus": gpus}
    elif event.event in ENDING_EVENTS:
        start = event.ts_ms if entry is None else entry["start"]
        known = gpus or ([] if entry is None else entry["gpus"])
        current[event.placement_id] = {"start": start, "end": event.ts_ms, "gpus": known}
    horizon = event.ts_ms - history_s * 1000
    return {pid: e for pid, e in current.items() if e["end"] is None or e["end"] >= horizon}


def allocations_of(state: NodeAllocations | None, uuid: str) -> list[Allocation]:
    """The allocation intervals of one GPU of the node."""
    if not state:
        return []
    return [Allocation(e["start"], e["end"]) for e in state.values() if uuid in e["gpus"]]
