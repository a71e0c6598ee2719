"""A real Kubernetes control plane for the tests (scripts/k8s.sh: etcd, kube-apiserver,
kube-scheduler with deploy/'s configuration, no kubelet) and a small client for it.

The binaries are built once from their Go modules and cached outside the clone
(scripts/k8s.sh build, about 10 minutes on 2 cores). A session that collected a
Kubernetes test builds them before its first test (tests/conftest.py), outside any
test's timeout, rather than skipping; a build that cannot run stops the session with
its one-line reason. Ports: FAIRLANE_TEST_K8S_PORT (etcd; +1 its peer
port), +64 the API server, +128 kube-scheduler's health port (27379, 27443, 27507 by
default, below the ephemeral range)."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.servers import ROOT

TEST_K8S_PORT = int(os.environ.get("FAIRLANE_TEST_K8S_PORT", "27379"))
T = TypeVar("T")


def _k8s(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(ROOT / "scripts/k8s.sh"), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/k8s.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


class ControlPlaneBuildError(RuntimeError):
    """scripts/k8s.sh build failed; the message is its last line (why)."""


def build_control_plane(env: dict[str, str] | None = None) -> None:
    """The cached binaries, or their first build (about 10 minutes), its progress lines
    passed on to stderr as they come."""
    with subprocess.Popen(
        [str(ROOT / "scripts/k8s.sh"), "build"],
        env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE,
        text=True,
    ) as build:
        assert build.stderr is not None
        last = ""
        for line in build.stderr:
            sys.stderr.write(line)
            last = line.strip() or last
    if build.returncode != 0:
        raise ControlPlaneBuildError(last.removeprefix("k8s.sh: "))


@dataclass(frozen=True)
class ControlPlane:
    url: str
    token: str
    ca_file: Path
    state_dir: Path
    extender_port: int  # where kube-scheduler expects Fairlane

    @property
    def token_file(self) -> Path:
        return self.state_dir / "pki/token"

    def client(self, impersonate: str | None = None) -> Kube:
        headers = {"Authorization": f"Bearer {self.token}"}
        if impersonate is not None:
            headers["Impersonate-User"] = impersonate
        return Kube(
            httpx.Client(
                base_url=self.url,
                verify=ssl.create_default_context(cafile=str(self.ca_file)),
                headers=headers,
            )
        )


@contextlib.contextmanager
def control_plane(extender_port: int) -> Iterator[ControlPlane]:
    env = {
        "K8S_ETCD_PORT": str(TEST_K8S_PORT),
        "K8S_API_PORT": str(TEST_K8S_PORT + 64),
        "K8S_SCHEDULER_PORT": str(TEST_K8S_PORT + 128),
        "FAIRLANE_EXTENDER_URL": f"http://127.0.0.1:{extender_port}/v1/extender",
    }
    _k8s("down", "--purge", env=env)
    out = dict(line.split("=", 1) for line in _k8s("up", env=env).splitlines() if "=" in line)
    try:
        yield ControlPlane(
            out["KUBE_API_URL"],
            out["KUBE_TOKEN"],
            Path(out["KUBE_CA_FILE"]),
            Path(out["KUBE_CA_FILE"]).parents[1],
            extender_port,
        )
    finally:
        _k8s("down", "--purge", env=env)


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout_s: float = 60,
    why: Callable[[], object] = lambda: "",
) -> T:
    """``probe()`` once it is neither None nor False; ``why()`` explains a timeout."""
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None or found is False:
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s; {why()}"
        time.sleep(0.3)
    return found


class Kube:
    """Just the calls the tests make, as JSON."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def request(
        self, method: str, path: str, body: Any = None, kind: str = "", **params: str
    ) -> httpx.Response:
        """``kind``: the body's media type after application/ (PATCH: merge-patch+json)."""
        kind = kind or ("merge-patch+json" if method == "PATCH" else "json")
        headers = {"Content-Type": f"application/{kind}"}
        content = None if body is None else json.dumps(body)
        return self.http.request(
            method, path, content=content, params=params or None, headers=headers
        )

    def ok(self, method: str, path: str, body: Any = None, **params: str) -> Any:
        answer = self.request(method, path, body, **params)
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def gpu_node(self, name: str, gpus: int) -> None:
        """A Node as a kubelet with NVIDIA's device plugin would register it."""
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        self.ok(
            "POST",
            "/api/v1/nodes",
            {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}},
        )
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
        self.ok(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": status},
        )

    def pod(
        self, name: str, gpus: int = 0, namespace: str = "default", share: int = 0, **extra: Any
    ) -> dict[str, Any]:
        """A pod asking for ``gpus`` whole GPUs or ``share`` thousandths of one."""
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        if share:
            limits["fairlane.dev/gpu-share"] = str(share)
        container = {
            "name": "main",
            "image": "registry.invalid/train:1",
            "resources": {"limits": limits},
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container], **extra},
        }
        created: dict[str, Any] = self.ok("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        return created

    def get_pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        pod: dict[str, Any] = self.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod

    def node_of(self, name: str, namespace: str = "default") -> str | None:
        node = self.get_pod(name, namespace)["spec"].get("nodeName")
        return str(node) if node else None

    def unschedulable(self, name: str, namespace: str = "default") -> str | None:
        """The PodScheduled=False message, once kube-scheduler wrote one."""
        for condition in self.get_pod(name, namespace).get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                return f"{condition.get('reason')}: {condition.get('message')}"
        return None

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        """Gone at once (no kubelet to wait for); already gone is fine."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        answer = self.request("DELETE", path, gracePeriodSeconds="0")
        assert answer.status_code in (200, 404), f"DELETE {path}: {answer.text}"

    def events_of(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        found = self.ok(
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            fieldSelector=f"involvedObject.name={name}",
        )
        return list(found["items"])
