"""Typed clients of the scheduler's placement API, one blocking and one asyncio.

    with Client("http://scheduler:8080", token) as api:
        placement = api.place(PlacementRequest(job_id="train-1", gpus_per_node=8))
        api.renew(placement.id)
        api.release(placement.id)

:class:`AsyncClient` has the same methods as coroutines. Both share the requests and
the reading of answers (:class:`_Call`, :func:`_placement`); only the sending differs.
Errors are :mod:`fairlane.errors`: :class:`UnreachableError` when nothing answered,
:class:`ApiError` for an error answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx
from pydantic import ValidationError

from fairlane.errors import ApiError, UnreachableError
from fairlane.models import ErrorBody, Placement, PlacementRequest

__all__ = ["AsyncClient", "Client"]

_DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class _Call:
    """One request of the API, independent of how it is sent."""

    method: str
    path: str
    json: dict[str, Any] | None = None

    @staticmethod
    def place(request: PlacementRequest) -> _Call:
        return _Call("POST", "/v1/placements", request.model_dump(mode="json", exclude_none=True))

    @staticmethod
    def get(placement_id: str) -> _Call:
        return _Call("GET", f"/v1/placements/{placement_id}")

    @staticmethod
    def release(placement_id: str) -> _Call:
        return _Call("DELETE", f"/v1/placements/{placement_id}")

    @staticmethod
    def renew(placement_id: str, lease_s: float | None) -> _Call:
        body = None if lease_s is None else {"lease_s": lease_s}
        return _Call("POST", f"/v1/placements/{placement_id}/renew", body)


def _placement(response: httpx.Response) -> Placement:
    """The placement answered, or the :class:`ApiError` the answer stands for."""
    if response.is_success:
        return Placement.model_validate_json(response.content)
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        raise ApiError(response.status_code, "http_error", response.text[:200]) from None
    raise ApiError(response.status_code, body.error, body.detail, body.rejections)


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class Client:
    """The placement API over a blocking :class:`httpx.Client`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(token), timeout=timeout_s, transport=transport
        )

    def _send(self, call: _Call) -> Placement:
        try:
            response = self._http.request(call.method, call.path, json=call.json)
        except httpx.TransportError as exc:
            raise UnreachableError(f"{self._http.base_url}: {exc!r}") from exc
        return _placement(response)

    def place(self, request: PlacementRequest) -> Placement:
        return self._send(_Call.place(request))

    def get(self, placement_id: str) -> Placement:
        return self._send(_Call.get(placement_id))

    def release(self, placement_id: str) -> Placement:
        """Free the placement's GPUs; releasing an ended placement returns it unchanged."""
        return self._send(_Call.release(placement_id))

    def renew(self, placement_id: str, lease_s: float | None = None) -> Placement:
        """Extend the lease from now (by the original lease unless ``lease_s``)."""
        return self._send(_Call.renew(placement_id, lease_s))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient:
    """The placement API over an :class:`httpx.AsyncClient`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout_s, transport=transport
        )

    async def _send(self, call: _Call) -> Placement:
        try:
            response = await self._http.request(call.method, call.path, json=call.json)
        except httpx.TransportError as exc:
            raise UnreachableError(f"{self._http.base_url}: {exc!r}") from exc
        return _placement(response)

    async def place(self, request: PlacementRequest) -> Placement:
        return await self._send(_Call.place(request))

    async def get(self, placement_id: str) -> Placement:
        return await self._send(_Call.get(placement_id))

    async def release(self, placement_id: str) -> Placement:
        """Free the placement's GPUs; releasing an ended placement returns it unchanged."""
        return await self._send(_Call.release(placement_id))

    async def renew(self, placement_id: str, lease_s: float | None = None) -> Placement:
        """Extend the lease from now (by the original lease unless ``lease_s``)."""
        return await self._send(_Call.renew(placement_id, lease_s))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
