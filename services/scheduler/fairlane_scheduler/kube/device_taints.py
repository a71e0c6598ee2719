"""The DRA controller: every ``interval_s``, the ResourceSlices of the GPU DRA driver
and the DeviceTaintRules Fairlane made are read, and the rules brought to what
core/device_taints.py says (created, updated, deleted); and allocated ResourceClaims
are published as placement events (core/dra_claims.py), so the scorer masks the load
of the pods using those GPUs. A new leader publishes every allocated claim again
(the scorer takes a repeated ``created`` as is); a claim that went while no replica
led is not released until it is seen again.

One replica at a time: the controller works only while it holds a Postgres advisory
lock on a connection of its own (every replica already shares that database, so no
Lease and no more RBAC); when that connection drops, the lock goes with it and another
replica takes over within one interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from fairlane_events.records import NodeAssignment, PlacementEvent
from fairlane_runtime.background import BackgroundLoop
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.core.device_taints import (
    MANAGED_BY,
    NVIDIA_DRIVER,
    desired_rules,
    devices_of,
    plan,
)
from fairlane_scheduler.core.dra_claims import claim_assignments, claim_events
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.kube.client import KubeClient

__all__ = ["RULES", "TaintController"]

log = logging.getLogger("fairlane.scheduler.device_taints")

RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
LOCK_KEY = 0x46414952  # "FAIR": the device-taint controller's advisory lock
_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


class TaintController(BackgroundLoop):
    def __init__(
        self,
        client: KubeClient,
        connect: Callable[[], Any],  # () -> awaitable asyncpg connection
        *,
        fleet: FleetView,
        policy: PlacementPolicy,
        clock_ms: Callable[[], int],
        outage: OutageLog,
        interval_s: float = 2.0,
        driver: str = NVIDIA_DRIVER,
        publish: Callable[[list[PlacementEvent]], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__("device-taints")
        self._publish = publish
        self._published: dict[str, tuple[str, str, tuple[NodeAssignment, ...]]] = {}
        self._client = client
        self._connect = connect
        self._fleet = fleet
        self._policy = policy
        self._clock_ms = clock_ms
        self._outage = outage
        self._interval_s = interval_s
        self._driver = driver
        self.leading = False

    async def run(self) -> None:
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect()
                await self._lead(conn)
                self.leading, self._published = True, {}
                log.info("device-taint controller: leading")
                while True:
                    await conn.execute("SELECT 1")  # the lock lives as long as this session
                    await self.reconcile()
                    self._outage.succeeded()
                    await asyncio.sleep(self._interval_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - sorted by OutageLog; the loop goes on
                self._outage.record(exc)
                await asyncio.sleep(self._interval_s)
            finally:
                self.leading = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()

    async def _lead(self, conn: asyncpg.Connection) -> None:
        """Until this session holds the lock (another replica may, for now)."""
        for _ in iter(int, 1):
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY):
                return
            await asyncio.sleep(self._interval_s)

    async def reconcile(self) -> None:
        slices = await self._client.get(SLICES, {"fieldSelector": f"spec.driver={self._driver}"})
        devices = devices_of(slices.get("items") or [], self._driver)
        desired = desired_rules(self._fleet, self._policy, devices, self._clock_ms())
        listed = await self._client.get(RULES, {"labelSelector": _SELECTOR})
        existing = {r["metadata"]["name"]: r for r in listed.get("items") or []}
        changes = plan(desired, {k: v.get("spec") or {} for k, v in existing.items()})
        for name, spec in changes.create.items():
            await self._client.request("POST", RULES, _rule(name, spec))
            log.info("tainted %s: %s", spec["deviceSelector"], spec["taint"]["value"])
        for name, spec in changes.update.items():
            body = _rule(name, spec)
            body["metadata"]["resourceVersion"] = existing[name]["metadata"]["resourceVersion"]
            await self._client.request("PUT", f"{RULES}/{name}", body)
        for name in changes.delete:
            await self._client.request("DELETE", f"{RULES}/{name}")
            log.info("lifted %s", (existing[name].get("spec") or {}).get("deviceSelector"))
        if self._publish is not None:
            claims = (await self._client.get(CLAIMS)).get("items") or []
            current = claim_assignments(claims, devices, self._driver)
            await self._publish(claim_events(self._published, current, self._clock_ms()))
            self._published = current


def _rule(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": spec,
    }
