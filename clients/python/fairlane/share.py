"""Inside a job that holds a share of one GPU (``fairlane run --gpu-share``): keep
PyTorch within the share's memory.

The launcher exports ``FAIRLANE_GPU_MEMORY_FRACTION`` (the share's memory over the GPU's);
:func:`limit_torch_memory` hands it to ``torch.cuda.set_per_process_memory_fraction``, a
cap on PyTorch's caching allocator: an allocation past it raises out-of-memory in this
process. It bounds what PyTorch allocates, not what CUDA's context or other libraries
take (docs/fractional.md). PyTorch is not a dependency of this package: the job brings it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

__all__ = ["MEMORY_FRACTION", "limit_torch_memory", "memory_fraction"]

MEMORY_FRACTION = "FAIRLANE_GPU_MEMORY_FRACTION"


def memory_fraction(environ: Mapping[str, str]) -> float | None:
    """The share's memory fraction from ``environ``; None outside a fractional placement."""
    raw = environ.get(MEMORY_FRACTION)
    if raw is None:
        return None
    fraction = float(raw)
    if not 0 < fraction <= 1:
        raise ValueError(f"{MEMORY_FRACTION} must be in (0, 1], got {raw!r}")
    return fraction


def limit_torch_memory(device: int = 0, environ: Mapping[str, str] = os.environ) -> float | None:
    """Cap PyTorch's allocator on ``device`` (0: the one GPU ``CUDA_VISIBLE_DEVICES``
    leaves a share) at the share's memory fraction, and return it; None, doing nothing,
    outside a fractional placement. Call it before the job allocates on the GPU."""
    fraction = memory_fraction(environ)
    if fraction is None:
        return None
    torch = importlib.import_module("torch")
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction
