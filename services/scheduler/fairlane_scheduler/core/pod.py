"""What a Kubernetes pod asks of its GPUs, read from the pod JSON (pure).

GPUs: the ``nvidia.com/gpu`` limits of the containers (an init container runs alone, so
the pod needs the larger of its containers' sum and any one init container). Models and
memory: the ``fairlane.dev/gpu-models`` ("H100,A100-80GB") and
``fairlane.dev/min-gpu-memory-gib`` annotations. Gang: ``fairlane.dev/gang`` (a name,
within the pod's namespace) and ``fairlane.dev/gang-size`` (how many pods it has). A pod
that asks for no GPU has no shape
(``None``): Fairlane has no opinion about it, and the extender passes it everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairlane_events.gpu_models import find_model
from fairlane_scheduler.core.placement import JobShape
from fairlane_scheduler.errors import PodError

__all__ = [
    "GANG_ANNOTATION",
    "GANG_SIZE_ANNOTATION",
    "GPU_RESOURCE",
    "MEMORY_ANNOTATION",
    "MODELS_ANNOTATION",
    "PodError",
    "pod_gang",
    "pod_shape",
]

GPU_RESOURCE = "nvidia.com/gpu"
MODELS_ANNOTATION = "fairlane.dev/gpu-models"
MEMORY_ANNOTATION = "fairlane.dev/min-gpu-memory-gib"
GANG_ANNOTATION = "fairlane.dev/gang"
GANG_SIZE_ANNOTATION = "fairlane.dev/gang-size"


def _gpus(container: Mapping[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    value = limits.get(GPU_RESOURCE, 0)
    try:
        count = int(str(value))
    except ValueError as exc:
        raise PodError(f"{GPU_RESOURCE} limit {value!r} is not a whole number") from exc
    if count < 0:
        raise PodError(f"{GPU_RESOURCE} limit {count} is negative")
    return count


def pod_shape(pod: Mapping[str, Any]) -> JobShape | None:
    """The pod's GPU request, or ``None`` when it asks for no ``nvidia.com/gpu``."""
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    main = sum(_gpus(c) for c in spec.get("containers") or [])
    init = max((_gpus(c) for c in spec.get("initContainers") or []), default=0)
    gpus = max(main, init)
    if gpus == 0:
        return None
    models = None
    if raw := annotations.get(MODELS_ANNOTATION):
        names = [m.strip() for m in str(raw).split(",") if m.strip()]
        specs = [(m, find_model(m)) for m in names]
        if unknown := [m for m, s in specs if s is None]:
            raise PodError(f"{MODELS_ANNOTATION}: unknown GPU models {unknown}")
        models = frozenset(s.key for _, s in specs if s is not None)
    memory = None
    if (raw_memory := annotations.get(MEMORY_ANNOTATION)) is not None:
        try:
            memory = float(raw_memory)
        except ValueError as exc:
            raise PodError(f"{MEMORY_ANNOTATION}: {raw_memory!r} is not a number") from exc
    return JobShape(gpus_per_node=gpus, models=models, min_gpu_memory_gib=memory)


def pod_gang(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(namespace/gang, size)`` for a pod of a gang, else ``None``."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if not (name := annotations.get(GANG_ANNOTATION)):
        return None
    raw = annotations.get(GANG_SIZE_ANNOTATION)
    try:
        size = int(str(raw))
    except ValueError as exc:
        raise PodError(f"{GANG_SIZE_ANNOTATION}: {raw!r} is not a whole number") from exc
    if size < 1:
        raise PodError(f"{GANG_SIZE_ANNOTATION}: {size} must be at least 1")
    return f"{metadata.get('namespace') or 'default'}/{name}", size
