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

A pod holding a share of a GPU (issue 29) is a placement in Postgres, named on the pod
by the ``fairlane.dev/placement-id`` annotation its Binding carried: the watch releases it
when the pod ends or is deleted, and a listing releases those whose pod is gone (it
went while no replica watched). The share placements are read *before* the pods are
listed: a placement exists only once its pod does, so one whose pod the later listing
lacks is a gone pod's, never a new pod's (no clocks compared). Its flight
(core/pod_shares.py) ends as a whole pod's hold does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from fairlane_runtime.background import BackgroundLoop
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.core.pod import PodError, PodRef, pod_gang, pod_shape
from fairlane_scheduler.core.pod_ledger import PodGpus, PodLedger
from fairlane_scheduler.core.pod_shares import ShareFlights
from fairlane_scheduler.kube.client import KubeApiError, KubeClient

__all__ = [
    "PLACEMENT_ANNOTATION",
    "PodWatch",
    "ShareReader",
    "ShareReleaser",
    "bind_pod",
]

#: The placement of a pod's GPU share, written on the pod when Fairlane binds it.
PLACEMENT_ANNOTATION = "fairlane.dev/placement-id"

#: Ends the share placements of these ids (their pods ended).
ShareReleaser = Callable[[Collection[str]], Awaitable[None]]
#: The live pod share placements: placement id -> pod uid.
ShareReader = Callable[[], Awaitable[dict[str, str]]]

log = logging.getLogger("fairlane.scheduler.kube")

_PODS = "/api/v1/pods"
_RETRY_S = 1.0


async def bind_pod(
    client: KubeClient, pod: PodRef, node: str, annotations: Mapping[str, str]
) -> None:
    """POST the pod's Binding, as kube-scheduler's default binder does. The API server
    copies the Binding's ``annotations`` onto the pod with its node, in one write
    (``BindingREST.setPodNodeAndMetadata``): the kubelet starts the containers with them."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "annotations": dict(annotations),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
    await client.request("POST", path, binding)


def _share_placement(pod: dict[str, Any]) -> str | None:
    """The placement id of a pod's GPU share, once Fairlane bound it."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    placement = annotations.get(PLACEMENT_ANNOTATION)
    return str(placement) if placement else None


def _ended(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def holding(pod: dict[str, Any]) -> tuple[str, str, PodGpus] | None:
    """(uid, node, GPUs) for a pod that holds GPUs on its node now, else None."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or _ended(pod):
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
    def __init__(
        self,
        client: KubeClient,
        ledger: PodLedger,
        outage: OutageLog,
        *,
        flights: ShareFlights,
        release_shares: ShareReleaser,
        read_shares: ShareReader,
    ) -> None:
        super().__init__("kube-pod-watch")
        self._client = client
        self._ledger = ledger
        self._outage = outage
        self._flights = flights
        self._release_shares = release_shares
        self._read_shares = read_shares
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
        try:
            shares = await self._read_shares()
        except Exception:  # Postgres down: the next listing releases what is left
            log.warning("reading the GPU shares of pods failed", exc_info=True)
            shares = {}
        listing = await self._client.get(_PODS)
        pods, live = {}, set()
        for pod in listing.get("items") or []:
            if (held := holding(pod)) is not None:
                pods[held[0]] = (held[1], held[2])
            if not _ended(pod):
                live.add(str((pod.get("metadata") or {}).get("uid")))
        self._ledger.replace_bound(pods)
        if gone := [placement for placement, uid in shares.items() if uid not in live]:
            log.info("releasing %d GPU shares of pods that are gone", len(gone))
            await self._settle(self._release_shares(gone))
        self.synced.set()
        return str(listing["metadata"]["resourceVersion"])

    async def _settle(self, release: Awaitable[None]) -> None:
        """Release shares; a database outage must not stop the watch (the ledger of
        whole pods is kept from memory), and the next listing releases what is left."""
        try:
            await release
        except Exception:  # Postgres down, or a replica's race: logged, never fatal
            log.warning("releasing GPU shares of ended pods failed", exc_info=True)

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
            placement = _share_placement(pod)
            unbound = not (pod.get("spec") or {}).get("nodeName")
            if placement is None and unbound and kind != "ADDED":
                self._flights.land(uid)  # unbound and changed: kube-scheduler wrote why
            elif placement is not None and (kind == "DELETED" or _ended(pod)):
                await self._settle(self._release_shares([placement]))
