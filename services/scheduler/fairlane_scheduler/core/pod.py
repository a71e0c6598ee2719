"""What a Kubernetes pod asks of its GPUs, read from the pod JSON (pure).

GPUs: the ``nvidia.com/gpu`` limits of the containers (an init container runs alone, so
the pod needs the larger of its containers' sum and any one init container). Models and
memory: the ``fairlane.dev/gpu-models`` ("H100,A100-80GB") and
``fairlane.dev/min-gpu-memory-gib`` annotations. Gang: ``fairlane.dev/gang`` (a name,
within the pod's namespace) and ``fairlane.dev/gang-size`` (how many pods it has). A pod
that asks for no GPU has no shape
(``None``): Fairlane has no opinion about it, and the extender passes it everywhere.

A share of ONE GPU (issue 29): the ``fairlane.dev/gpu-share`` extended resource in
thousandths of a GPU (1..1000; containers share the pod's GPU, so their shares add up,
an init container's counts alone), and optionally its memory in the
``fairlane.dev/gpu-memory-mib`` annotation (at most the largest allowed model's memory).
A pod asks for whole GPUs or for a share, never both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairlane_events.gpu_models import CATALOG, find_model
from fairlane_scheduler.core.placement import JobShape
from fairlane_scheduler.core.shares import SHARE_SCALE
from fairlane_scheduler.errors import PodError

__all__ = [
    "GANG_ANNOTATION",
    "GANG_SIZE_ANNOTATION",
    "GPU_MEMORY_MIB_ANNOTATION",
    "GPU_RESOURCE",
    "MEMORY_ANNOTATION",
    "MODELS_ANNOTATION",
    "SHARE_RESOURCE",
    "PodError",
    "PodRef",
    "PodShare",
    "pod_gang",
    "pod_shape",
    "pod_share",
]

GPU_RESOURCE = "nvidia.com/gpu"
MODELS_ANNOTATION = "fairlane.dev/gpu-models"
MEMORY_ANNOTATION = "fairlane.dev/min-gpu-memory-gib"
GANG_ANNOTATION = "fairlane.dev/gang"
GANG_SIZE_ANNOTATION = "fairlane.dev/gang-size"
SHARE_RESOURCE = "fairlane.dev/gpu-share"
GPU_MEMORY_MIB_ANNOTATION = "fairlane.dev/gpu-memory-mib"


@dataclass(frozen=True)
class PodRef:
    """Which pod: what a Binding names."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PodShare:
    """A pod's share of one GPU: thousandths of its compute, the memory it needs (None:
    the share of the chosen GPU's), and which GPUs it accepts (``shape``: one GPU)."""

    milli: int
    memory_mib: int | None
    shape: JobShape


def _amount(container: Mapping[str, Any], resource: str) -> int:
    """The container's limit of an extended resource (its request when it has no limit:
    Kubernetes makes them equal)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    value = limits.get(resource, (resources.get("requests") or {}).get(resource, 0))
    try:
        count = int(str(value))
    except ValueError as exc:
        raise PodError(f"{resource} limit {value!r} is not a whole number") from exc
    if count < 0:
        raise PodError(f"{resource} limit {count} is negative")
    return count


def _names(spec: Mapping[str, Any], resource: str) -> bool:
    """Whether any container of the pod names ``resource`` (with any amount)."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    for container in containers:
        resources = container.get("resources") or {}
        if resource in (resources.get("limits") or {}) or resource in (
            resources.get("requests") or {}
        ):
            return True
    return False


def _pod_amount(spec: Mapping[str, Any], resource: str) -> int:
    """What the pod needs at once: its containers' sum, or any one init container."""
    main = sum(_amount(c, resource) for c in spec.get("containers") or [])
    init = max((_amount(c, resource) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def pod_shape(pod: Mapping[str, Any]) -> JobShape | None:
    """The pod's whole-GPU request, or ``None`` when it asks for no ``nvidia.com/gpu``."""
    spec = pod.get("spec") or {}
    gpus = _pod_amount(spec, GPU_RESOURCE)
    if gpus == 0:
        return None
    if _pod_amount(spec, SHARE_RESOURCE):
        raise PodError(f"{SHARE_RESOURCE}: a pod asks for {GPU_RESOURCE} or a share, not both")
    return _shape(pod, gpus)


def pod_share(pod: Mapping[str, Any]) -> PodShare | None:
    """The pod's share of one GPU, or ``None`` when it asks for no ``fairlane.dev/gpu-share``."""
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    milli = _pod_amount(spec, SHARE_RESOURCE)
    raw_memory = annotations.get(GPU_MEMORY_MIB_ANNOTATION)
    if milli == 0 and _names(spec, SHARE_RESOURCE):
        raise PodError(f"{SHARE_RESOURCE}: 0 is no share; ask for 1..{SHARE_SCALE} thousandths")
    if milli == 0:
        if raw_memory is not None:
            raise PodError(f"{SHARE_RESOURCE}: {GPU_MEMORY_MIB_ANNOTATION} needs a share too")
        return None
    if _pod_amount(spec, GPU_RESOURCE):
        raise PodError(f"{SHARE_RESOURCE}: a pod asks for {GPU_RESOURCE} or a share, not both")
    if milli > SHARE_SCALE:
        raise PodError(
            f"{SHARE_RESOURCE}: {milli} is more than one GPU ({SHARE_SCALE} thousandths); "
            f"ask for {GPU_RESOURCE} instead"
        )
    shape = _shape(pod, 1)
    memory = None if raw_memory is None else _memory_mib(str(raw_memory), shape)
    return PodShare(milli, memory, shape)


def _memory_mib(raw: str, shape: JobShape) -> int:
    try:
        memory = int(raw)
    except ValueError as exc:
        raise PodError(f"{GPU_MEMORY_MIB_ANNOTATION}: {raw!r} is not a whole number") from exc
    if memory < 1:
        raise PodError(f"{GPU_MEMORY_MIB_ANNOTATION}: {memory} must be at least 1")
    models = CATALOG.keys() if shape.models is None else shape.models
    largest = max(round(CATALOG[key].mem_gib * 1024) for key in models)
    if memory > largest:
        raise PodError(
            f"{GPU_MEMORY_MIB_ANNOTATION}: {memory} MiB is more than the largest allowed "
            f"GPU's memory ({largest} MiB)"
        )
    return memory


def _shape(pod: Mapping[str, Any], gpus: int) -> JobShape:
    """``gpus`` per node, of the models and size the annotations allow."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
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
