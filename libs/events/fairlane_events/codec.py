"""Bytes <-> records. The one place that knows records travel as UTF-8 JSON."""

from __future__ import annotations

from typing import TypeVar

import orjson
from pydantic import ValidationError

from fairlane_events.errors import DecodeError
from fairlane_events.records import Record

__all__ = ["DecodeError", "decode", "encode"]

R = TypeVar("R", bound=Record)


def encode(record: Record) -> bytes:
    """Serialise a record with its wire names (``schema``, not ``schema_``)."""
    return orjson.dumps(record.model_dump(mode="json", by_alias=True))


def decode(model: type[R], data: bytes | None) -> R:
    """Parse and validate ``data`` as ``model``, or raise :class:`DecodeError` saying why."""
    if data is None:
        raise DecodeError("empty value (tombstone)")
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<record>"
        raise DecodeError(f"{where}: {first['msg']} ({exc.error_count()} error(s))") from exc
