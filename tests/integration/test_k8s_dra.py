"""GPU health as DRA device taints, on the real control plane: kube-scheduler's own DRA
allocator never picks the GPU that the simulated fleet throttles while Fairlane's
DeviceTaintRule is on it, and picks it again once the rule is lifted.

No kubelet and no DRA driver: the test publishes a ResourceSlice per node shaped as
NVIDIA's driver (gpu.nvidia.com) does — devices ``gpu-<minor>`` with the GPU's ``uuid``
attribute — and a DeviceClass with ``extendedResourceName: nvidia.com/gpu``, so that a
classic ``nvidia.com/gpu: 2`` limit is allocated from DRA devices too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from fairlane_events.codec import decode
from fairlane_events.records import PlacementEvent
from fairlane_events.topics import PLACEMENTS
from fairlane_scheduler.adapters.scores import read_from_beginning
from fairlane_scheduler.core.device_taints import TAINT_KEY
from fairlane_scheduler.kube.device_taints import RULES
from tests.kube import Kube, wait_for
from tests.kube_stack import FairlaneStack, stack_fixture

DRIVER = "gpu.nvidia.com"
CLASS = "fairlane-test-gpu"
# One node of 4 GPUs; GPU 0 throttles for the first 30 s.
SCENARIO = """
name = "dra: one GPU throttles, then recovers"

[fleet]
nodes = 1
gpus_per_node = 4
models = ["H100"]
degraded_fraction = 0.0

[[events]]
kind = "thermal"
nodes = [0]
gpus = [0]
start_s = 0
duration_s = 30
ramp_s = 1
clock_factor = 0.3
"""


def resource_slice(node: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{g['index']}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": g["uuid"]},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "driverVersion": {"version": "580.65.6"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for g in gpus
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


fairlane = stack_fixture(
    "dra",
    SCENARIO,
    {"FAIRLANE_KUBE_DEVICE_TAINTS": "true", "FAIRLANE_KUBE_DEVICE_TAINTS_INTERVAL_S": "1"},
)


@pytest.fixture(scope="module")
def stack(fairlane: FairlaneStack) -> Iterator[FairlaneStack]:
    s, node = fairlane, fairlane.node(0)
    gpus = s.api(f"/v1/nodes/{node}")["gpus"]
    s.kube.gpu_node(node, 0)  # a DRA node: no device-plugin resource
    s.kube.ok("POST", "/apis/resource.k8s.io/v1/resourceslices", resource_slice(node, gpus))
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {
            "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }
    s.kube.ok("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class)
    try:
        yield s
    finally:
        remove_dra_objects(s.kube, node)


def remove_dra_objects(kube: Kube, node: str) -> None:
    """Leave the control plane as the module found it: a DeviceClass that maps
    ``nvidia.com/gpu`` to DRA devices would change how later modules' pods schedule."""
    for pod in ("with-claim", "classic"):
        kube.delete_pod(pod)
    collections = (
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/deviceclasses",
        RULES,
    )
    for collection in collections:
        answer = kube.request("DELETE", collection)
        assert answer.status_code == 200, f"DELETE {collection}: {answer.text}"
    kube.ok("DELETE", f"/api/v1/nodes/{node}")


def rules(kube: Kube) -> dict[str, dict[str, Any]]:
    items = kube.ok("GET", RULES)["items"]
    return {r["spec"]["deviceSelector"]["device"]: r["spec"] for r in items}


def allocated(kube: Kube, claim: str) -> list[str] | None:
    status = kube.ok("GET", f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{claim}")
    results = ((status.get("status") or {}).get("allocation") or {}).get("devices", {})
    found = [r["device"] for r in results.get("results") or []]
    return found or None


def claim_of_classic_pod(kube: Kube, pod: str) -> str | None:
    status = kube.get_pod(pod).get("status") or {}
    name = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    return str(name) if name else None


async def placement_events(bootstrap: str, placement_id: str) -> list[PlacementEvent]:
    """Every event of one placement on the placements topic so far."""
    consumer, partitions = await read_from_beginning(bootstrap, PLACEMENTS)
    try:
        ends = await consumer.end_offsets(partitions)
        found: list[PlacementEvent] = []

        async def behind() -> bool:
            return any([await consumer.position(tp) < end for tp, end in ends.items()])

        while await behind():
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                events = (decode(PlacementEvent, m.value) for m in messages)
                found += [e for e in events if e.placement_id == placement_id]
        return found
    finally:
        await consumer.stop()


def test_the_allocator_never_picks_the_tainted_gpu_and_picks_it_after_recovery(
    stack: FairlaneStack, kafka_bootstrap: str
) -> None:
    kube = stack.kube
    tainted = wait_for("gpu-0 tainted", lambda: rules(kube).get("gpu-0"), 60)
    assert tainted["taint"]["key"] == TAINT_KEY
    assert tainted["taint"]["effect"] == "NoSchedule"
    assert tainted["taint"]["value"].split("_")[0] in ("below-threshold", "cooling")
    assert set(rules(kube)) == {"gpu-0"}  # the healthy three are left alone

    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "two-gpus"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": 2}}]
            }
        },
    }
    kube.ok("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", claim)
    kube.pod(
        "with-claim",
        resourceClaims=[{"name": "gpus", "resourceClaimName": "two-gpus"}],
    )
    devices = wait_for("the claim allocated", lambda: allocated(kube, "two-gpus"), 60)
    assert "gpu-0" not in devices
    assert len(devices) == 2
    # The claim's GPUs are published as a placement: the scorer masks their load.
    uid = kube.ok("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/two-gpus")[
        "metadata"
    ]["uid"]
    created = wait_for(
        "the claim's placement event",
        lambda: asyncio.run(placement_events(kafka_bootstrap, uid)) or None,
        30,
    )
    assert created[0].event == "created"
    gpus = {g.uuid for n in created[0].nodes for g in n.gpus}
    uuids = {g["index"]: g["uuid"] for g in stack.api(f"/v1/nodes/{stack.node(0)}")["gpus"]}
    assert gpus == {uuids[int(d.removeprefix("gpu-"))] for d in devices}
    # A classic limit, served from DRA devices: one untainted GPU is left, so it waits.
    kube.pod("classic", gpus=2)
    message = wait_for("the classic pod refused", lambda: kube.unschedulable("classic"), 60)
    assert kube.node_of("classic") is None, message
    assert rules(kube).get("gpu-0") is not None  # still held out meanwhile

    wait_for("gpu-0's rule lifted after the window", lambda: "gpu-0" not in rules(kube), 150)
    # The rule's deletion is an event kube-scheduler's DRA plugin requeues the pod on.
    node = wait_for("the classic pod bound", lambda: kube.node_of("classic"), 60)
    assert node == stack.node(0)
    name = wait_for("its claim", lambda: claim_of_classic_pod(kube, "classic"), 30)
    assert "gpu-0" in (allocated(kube, name) or [])  # the recovered GPU is picked again
