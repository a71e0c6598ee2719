"""Placements as the client sees them, for the client's and the launcher's tests."""

from __future__ import annotations

from fairlane_events.records import GpuSlot, NodeAssignment


def placement_nodes(*gpus: int, master_port: int = 29500) -> list[NodeAssignment]:
    """A placement of ``len(gpus)`` nodes, node i (``n<i>``) holding gpus[i] GPUs with
    uuids ``G<i>-<j>`` at indices 2, 3, ... (so an index is never mistaken for a rank)."""
    world = sum(gpus)
    return [
        NodeAssignment(
            node=f"n{i}",
            node_rank=i,
            gpus=[GpuSlot(uuid=f"G{i}-{j}", index=j + 2) for j in range(count)],
            cuda_visible_devices=",".join(str(j + 2) for j in range(count)),
            master_addr="n0",
            master_port=master_port,
            world_size=world,
        )
        for i, count in enumerate(gpus)
    ]
