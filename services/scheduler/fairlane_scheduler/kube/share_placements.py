"""A fractional pod's share as a Fairlane placement in Postgres (issue 29).

The extender's bind records the share through the placement service, on the node
kube-scheduler chose: the database's per-GPU sums are the arbiter, across replicas and
against the API's own fractional placements. The placement's job id is ``pod/<uid>`` in
the pod's namespace (a bind kube-scheduler retries finds it again), and its slot and
environment become the pod's annotations, which the pod reads with the downward API
(docs/kubernetes.md, Fractional GPUs). The placement ends when the pod does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.core.pod import PodRef, PodShare
from fairlane_scheduler.core.shares import SHARE_SCALE
from fairlane_scheduler.errors import NotFoundError
from fairlane_scheduler.kube.pods import PLACEMENT_ANNOTATION
from fairlane_scheduler.service import PlacementService

__all__ = [
    "GPU_UUID_ANNOTATION",
    "POD_JOB_PREFIX",
    "pod_share_placements",
    "pod_share_request",
    "release_shares",
    "share_annotations",
]

POD_JOB_PREFIX = "pod/"
#: The GPU of a pod's share: what the pod gives NVIDIA_VISIBLE_DEVICES.
GPU_UUID_ANNOTATION = "fairlane.dev/gpu-uuid"
_ENV_ANNOTATION = "fairlane.dev/{}"  # one per variable of the placement's environment
_PAGE = 500


def pod_share_request(pod: PodRef, share: PodShare, node: str) -> PlacementRequest:
    """The placement request of a pod's share on ``node``; its fingerprint is the ask's,
    so a retried bind of the same pod finds its placement."""
    ask = f"{pod.namespace}/{pod.uid}/{share}/{node}"
    return PlacementRequest(
        job_id=f"{POD_JOB_PREFIX}{pod.uid}",
        namespace=pod.namespace,
        gpus_per_node=1,
        min_gpu_memory_gib=share.shape.min_gpu_memory_gib,
        models=share.shape.models,
        fingerprint=hashlib.sha256(ask.encode()).hexdigest(),
        gpu_share=share.milli / SHARE_SCALE,
        gpu_memory_mib=share.memory_mib,
        on_node=node,
    )


def share_annotations(placement: Placement) -> dict[str, str]:
    """The pod's annotations for its share: the GPU, the placement, and each variable
    the job sets to stay inside the share (``fairlane.dev/<NAME>``)."""
    (assignment,) = placement.nodes
    (slot,) = assignment.gpus
    env = assignment.env or {}
    return {
        GPU_UUID_ANNOTATION: slot.uuid,
        PLACEMENT_ANNOTATION: placement.id,
        **{_ENV_ANNOTATION.format(name): value for name, value in env.items()},
    }


async def release_shares(service: PlacementService, placement_ids: Collection[str]) -> None:
    """End the share placements of pods that ended (already ended or gone is fine:
    every replica's watch sees the pod end)."""
    for placement_id in placement_ids:
        try:
            await service.release(placement_id)
        except NotFoundError:
            continue


async def pod_share_placements(service: PlacementService) -> dict[str, str]:
    """Every live pod share placement: its id -> its pod's uid."""
    shares: dict[str, str] = {}
    before = None
    while True:
        page = await service.page(None, "placed", _PAGE, before)
        for placement in page:
            if placement.job_id.startswith(POD_JOB_PREFIX):
                shares[placement.id] = placement.job_id[len(POD_JOB_PREFIX) :]
        if len(page) < _PAGE:
            return shares
        before = page[-1].created_at_ms
