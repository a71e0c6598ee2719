"""Every manifest in deploy/ is accepted by the real kube-apiserver (server-side apply,
dry run), and the scheduler's service account may do exactly what Fairlane does with
it (deploy/rbac.yaml) and nothing else."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube import ControlPlane, Kube

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAMESPACE = "fairlane"
NOT_CLUSTER_OBJECTS = ("Kustomization", "KubeSchedulerConfiguration")
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:fairlane-scheduler"


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file, object) for every cluster object under deploy/, and the ConfigMaps that
    the kustomizations generate from files."""
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            name = str(path.relative_to(DEPLOY))
            if doc.get("kind") not in NOT_CLUSTER_OBJECTS:
                found.append((name, doc))
            for generated in doc.get("configMapGenerator") or []:
                data = {}
                for entry in generated["files"]:
                    key, _, source = entry.rpartition("=")
                    data[key or Path(source).name] = (path.parent / source).read_text()
                config_map = {"apiVersion": "v1", "kind": "ConfigMap", "data": data}
                found.append((name, {**config_map, "metadata": {"name": generated["name"]}}))
    return found


def resources(kube: Kube) -> dict[tuple[str, str], tuple[str, bool]]:
    """(apiVersion, kind) -> (collection path, namespaced), from the server's discovery."""
    groups = [("v1", "/api/v1")]
    for group in kube.ok("GET", "/apis")["groups"]:
        version = group["preferredVersion"]["groupVersion"]
        groups.append((version, f"/apis/{version}"))
        groups += [(v["groupVersion"], f"/apis/{v['groupVersion']}") for v in group["versions"]]
    found = {}
    for version, base in groups:
        for r in kube.ok("GET", base)["resources"]:
            if "/" not in r["name"]:
                found[(version, r["kind"])] = (f"{base}/{r['name']}", r["namespaced"])
    return found


def apply(
    kube: Kube, kinds: dict[tuple[str, str], tuple[str, bool]], obj: dict[str, Any], **dry: str
) -> Any:
    path, namespaced = kinds[(obj["apiVersion"], obj["kind"])]
    if namespaced:
        base, _, plural = path.rpartition("/")
        path = f"{base}/namespaces/{NAMESPACE}/{plural}"
    obj = {
        **obj,
        "metadata": {**obj["metadata"], "namespace": NAMESPACE} if namespaced else obj["metadata"],
    }
    return kube.request(
        "PATCH",
        f"{path}/{obj['metadata']['name']}",
        obj,
        kind="apply-patch+yaml",
        fieldManager="fairlane-test",
        force="true",
        **dry,
    )


@pytest.fixture(scope="module")
def admin(kube_plane: ControlPlane) -> tuple[Kube, dict[tuple[str, str], tuple[str, bool]]]:
    kube = kube_plane.client()
    kinds = resources(kube)
    namespace = yaml.safe_load((DEPLOY / "namespace.yaml").read_text())
    assert apply(kube, kinds, namespace).status_code in (200, 201)
    return kube, kinds


@pytest.mark.parametrize(
    ("name", "obj"), manifests(), ids=lambda v: v if isinstance(v, str) else v["metadata"]["name"]
)
def test_the_api_server_accepts_every_manifest(
    admin: tuple[Kube, dict[tuple[str, str], tuple[str, bool]]], name: str, obj: dict[str, Any]
) -> None:
    kube, kinds = admin
    answer = apply(kube, kinds, obj, dryRun="All")
    assert answer.status_code in (200, 201), f"{name} {obj['kind']}: {answer.text}"


ALLOWED = [
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("create", "", "pods", "binding"),
    ("patch", "", "nodes", ""),
    ("list", "resource.k8s.io", "resourceslices", ""),
    ("list", "resource.k8s.io", "resourceclaims", ""),
    ("list", "resource.k8s.io", "devicetaintrules", ""),
    ("create", "resource.k8s.io", "devicetaintrules", ""),
    ("update", "resource.k8s.io", "devicetaintrules", ""),
    ("delete", "resource.k8s.io", "devicetaintrules", ""),
]
REFUSED = [
    ("get", "", "pods", ""),
    ("create", "", "pods", ""),
    ("delete", "", "pods", ""),
    ("update", "", "pods", "status"),
    ("list", "", "secrets", ""),
    ("get", "", "configmaps", ""),
    ("update", "", "nodes", ""),
    ("patch", "", "nodes", "status"),
    ("create", "", "events", ""),
    ("patch", "resource.k8s.io", "devicetaintrules", ""),
    ("create", "resource.k8s.io", "resourceslices", ""),
    ("update", "resource.k8s.io", "resourceclaims", "status"),
    ("create", "coordination.k8s.io", "leases", ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
]


def test_the_scheduler_account_may_do_what_fairlane_does_and_nothing_else(
    kube_plane: ControlPlane, admin: tuple[Kube, dict[tuple[str, str], tuple[str, bool]]]
) -> None:
    kube, kinds = admin
    for doc in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()):
        assert apply(kube, kinds, doc).status_code in (200, 201)
    account = kube_plane.client(impersonate=ACCOUNT)

    def may(verb: str, group: str, resource: str, sub: str) -> bool:
        attributes = {"verb": verb, "group": group, "resource": resource}
        if sub:
            attributes["subresource"] = sub
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {**attributes, "namespace": "default"}},
        }
        answer = account.ok(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review
        )
        return bool(answer["status"]["allowed"])

    # The API server's RBAC authorizer reads the new roles and bindings from its watch
    # caches, each in its own time: under load some took effect after the first review.
    deadline = time.monotonic() + 30
    while (denied := [a for a in ALLOWED if not may(*a)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert denied == []
    assert [r for r in REFUSED if may(*r)] == []
    # And for real: what the pod watch does works, anything else is refused.
    assert account.request("GET", "/api/v1/pods").status_code == 200
    assert account.request("GET", "/api/v1/namespaces/default/secrets").status_code == 403
    assert account.request("GET", "/api/v1/nodes").status_code == 403
