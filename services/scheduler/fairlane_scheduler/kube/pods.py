"""The extender's two Kubernetes edges: the binder of its bind verb, and a watch of the
pods that hold GPUs, which keeps the pod ledger current (core/pod_ledger.py).

The watch lists every pod, then follows changes (as kube-scheduler's own informer
does); a pod asking for ``nvidia.com/gpu`` counts while it is bound and not
finished, and is released when it ends or is deleted. An unbound pod that changes
(kube-scheduler wrote why it failed) or is deleted loses the hold its approval took.
It also learns of pods bound without Fairlane (another replica's binding, a pod
created with ``spec.nodeName``), and after a restart it rebuilds the ledger from the
listing. When the watch breaks it lists again (the ledger is replaced,
not appended to), after a short pause while the API server is away.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fairlane_runtime.background import BackgroundLoop
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.core.pod import PodError, pod_gang, pod_shape
from fairlane_scheduler.core.pod_ledger import PodGpus, PodLedger
from fairlane_scheduler.kube.client import KubeApiError, KubeClient

__all__ = ["PodWatch", "bind_pod"]

log = logging.getLogger("fairlane.scheduler.kube")

_PODS = "/api/v1/pods"
_RETRY_S = 1.0


async def bind_pod(client: KubeClient, namespace: str, name: str, uid: str, node: str) -> None:
    """POST the pod's Binding, as kube-scheduler's default binder does."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await client.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)


def holding(pod: dict[str, Any]) -> tuple[str, str, PodGpus] | None:
    """(uid, node, GPUs) for a pod that holds GPUs on its node now, else None."""
    node = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node or phase in ("Succeeded", "Failed"):
        return None
    try:
        shape, gang = pod_shape(pod), pod_gang(pod)
    except PodError:
        return None  # the extender never passed it either
    if shape is None:
        return None
    uid = str((pod.get("metadata") or {}).get("uid"))
    return uid, str(node), PodGpus(shape.gpus_per_node, None if gang is None else gang[0])


class PodWatch(BackgroundLoop):
    def __init__(self, client: KubeClient, ledger: PodLedger, outage: OutageLog) -> None:
        super().__init__("kube-pod-watch")
        self._client = client
        self._ledger = ledger
        self._outage = outage
        self.synced = asyncio.Event()  # the first listing is in the ledger

    async def run(self) -> None:
        while True:
            try:
                version = await self._list()
                self._outage.succeeded()
                await self._follow(version)
            except (KubeApiError, OSError, ValueError) as exc:
                self._outage.record(exc)
                await asyncio.sleep(_RETRY_S)
            except Exception as exc:  # noqa: BLE001 - httpx transport errors and the like
                self._outage.record(exc)
                await asyncio.sleep(_RETRY_S)

    async def _list(self) -> str:
        listing = await self._client.get(_PODS)
        pods = {}
        for pod in listing.get("items") or []:
            if (held := holding(pod)) is not None:
                pods[held[0]] = (held[1], held[2])
        self._ledger.replace_bound(pods)
        self.synced.set()
        return str(listing["metadata"]["resourceVersion"])

    async def _follow(self, version: str) -> None:
        async for event in self._client.watch(_PODS, version):
            kind, pod = event.get("type"), event.get("object") or {}
            if kind == "ERROR":  # e.g. 410 Gone: too old a version; list again
                log.info("pod watch ended: %s", pod.get("message"))
                return
            if kind == "BOOKMARK":
                continue
            uid = str((pod.get("metadata") or {}).get("uid"))
            held = holding(pod) if kind != "DELETED" else None
            if held is None:
                self._ledger.release(uid)
            else:
                self._ledger.bind(*held)
