"""Fractional GPUs in integer thousandths (pure): a request's ``gpu_share`` (0 < share
<= 1 of one GPU's compute) is kept and summed as ``share_milli`` (1..1000), so that the
database's per-GPU sum is exact; a whole GPU counts as :data:`SHARE_SCALE`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from fairlane_events.records import GpuSlot, NodeAssignment

__all__ = ["SHARE_SCALE", "GpuUse", "gpus_by_model", "share_env", "share_milli", "slot_milli"]

#: A whole GPU, in the unit shares are summed in.
SHARE_SCALE = 1000


def share_milli(share: float) -> int:
    """``share`` of one GPU in thousandths, rounded to the nearest (0.25 -> 250)."""
    return round(share * SHARE_SCALE)


def slot_milli(slot: GpuSlot) -> int:
    """What a placement's GPU slot holds of its GPU: its share, or all of a whole GPU."""
    return SHARE_SCALE if slot.share is None else share_milli(slot.share)


def gpus_by_model(nodes: Iterable[NodeAssignment], models: Mapping[str, str]) -> dict[str, float]:
    """GPUs per model (``models``: uuid -> catalogue key) these nodes hold, a share as its
    part of a GPU: what a quota counts."""
    milli: Counter[str] = Counter()
    for slot in (g for n in nodes for g in n.gpus):
        milli[models.get(slot.uuid, "")] += slot_milli(slot)
    return {model: n / SHARE_SCALE for model, n in milli.items()}


class GpuUse(NamedTuple):
    """What fractional placements hold of one GPU: their share in thousandths, their
    memory in MiB and how many they are."""

    milli: int
    memory_mib: int
    tenants: int


def share_env(milli: int, memory_mib: int, gpu_memory_mib: int) -> dict[str, str]:
    """What a job holding ``milli`` thousandths of one GPU and ``memory_mib`` of its
    ``gpu_memory_mib`` sets to stay inside its share (docs/fractional.md says which of
    them enforces what, per framework):

    - ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: the share in % of the SMs (at least 1),
      honoured by an MPS client when an MPS control daemon runs on the node;
    - ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: ``0=<MiB>M``, MPS's memory limit for device 0
      (the only one ``CUDA_VISIBLE_DEVICES`` leaves the job);
    - ``XLA_PYTHON_CLIENT_MEM_FRACTION``: JAX's preallocation, as a fraction;
    - ``FAIRLANE_GPU_SHARE``, ``FAIRLANE_GPU_MEMORY_MIB``, ``FAIRLANE_GPU_MEMORY_FRACTION``:
      for the client's helper (PyTorch's per-process memory fraction) and the job's own code.

    Fractions are rounded down to 1/1000, so a job never asks for more than its share.
    """
    fraction = (memory_mib * SHARE_SCALE // gpu_memory_mib) / SHARE_SCALE
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, milli // 10)),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory_mib}M",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.3f}",
        "FAIRLANE_GPU_SHARE": f"{milli / SHARE_SCALE:.3f}",
        "FAIRLANE_GPU_MEMORY_MIB": str(memory_mib),
        "FAIRLANE_GPU_MEMORY_FRACTION": f"{fraction:.3f}",
    }
