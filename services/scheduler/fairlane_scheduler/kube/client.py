"""A thin Kubernetes API client on httpx: bearer token, the cluster's CA, JSON in and
out, and watches as a stream of events. Plain REST on purpose: the few calls Fairlane
makes (pods, bindings, ResourceSlices, DeviceTaintRules, leases) are stable API paths,
and resource.k8s.io/v1 kinds of the newest releases need no generated models.

In a pod it reads the service account's token and CA (re-reading the token, which the
kubelet rotates); elsewhere the URL, token file and CA file come from settings."""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from fairlane_scheduler.errors import KubeApiError

__all__ = ["IN_CLUSTER", "KubeApiError", "KubeClient", "KubeConfig"]

IN_CLUSTER = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class KubeConfig:
    url: str
    token_file: Path
    ca_file: Path | None  # None: the system's CAs

    @classmethod
    def in_cluster(cls) -> KubeConfig:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        return cls(f"https://{host}:{port}", IN_CLUSTER / "token", IN_CLUSTER / "ca.crt")


class KubeClient:
    def __init__(self, config: KubeConfig, timeout_s: float = 10.0) -> None:
        self._config = config
        verify: ssl.SSLContext | bool = True
        if config.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(config.ca_file))
        self._http = httpx.AsyncClient(
            base_url=config.url, verify=verify, timeout=httpx.Timeout(timeout_s, read=None)
        )

    async def close(self) -> None:
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        token = self._config.token_file.read_text().strip()
        return {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = self._headers()
        content = None
        if body is not None:
            content, headers["Content-Type"] = orjson.dumps(body), content_type
        answer = await self._http.request(
            method, path, content=content, params=params, headers=headers
        )
        if answer.status_code >= 400:
            raise KubeApiError(answer.status_code, _message(answer.content))
        return orjson.loads(answer.content) if answer.content else None

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def watch(
        self, path: str, resource_version: str, params: dict[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch from ``resource_version`` until the server ends it."""
        query = {**(params or {}), "watch": "1", "resourceVersion": resource_version}
        query["allowWatchBookmarks"] = "true"
        async with self._http.stream("GET", path, params=query, headers=self._headers()) as answer:
            if answer.status_code >= 400:
                raise KubeApiError(answer.status_code, _message(await answer.aread()))
            async for line in answer.aiter_lines():
                if line.strip():
                    yield orjson.loads(line)


def _message(content: bytes) -> str:
    try:
        status = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content.decode(errors="replace")[:500]
    return str(status.get("message", status)) if isinstance(status, dict) else str(status)
