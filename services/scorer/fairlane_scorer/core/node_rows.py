"""One table row per node: its :class:`~fairlane_scorer.core.node_state.NodeState` as
compact bytes (pure).

Every GPU of a node arrives in the node's record, so one row per node means one table
write and one changelog message per record instead of one per GPU. Format 2 (written
since the columnar state): a length-prefixed JSON header with the per-GPU labels and the
arrays' shapes, then the state's arrays as little-endian bytes (``kept``, ``recent``,
``filtered``, ``emitted`` as float64, ``last_ecc`` as int64): exact, about 32 bytes per
kept sample, and decoded without a copy. Format 1 (one JSON entry and one block of kept
rows per GPU) is still read: a changelog written before stays readable.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson

from fairlane_scorer.core.node_state import (
    EMITTED_COLUMNS,
    NodeState,
    NodeWindows,
    as_state,
)
from fairlane_scorer.core.window import RECENT_COLUMNS, FloatArray, GpuWindow
from fairlane_scorer.errors import NodeRowFormatError
from fairlane_scoring.config import COMPONENTS
from fairlane_scoring.reference import KEPT_COLUMNS

__all__ = ["NodeWindows", "decode_node", "encode_node"]

_HEADER_LENGTH = struct.Struct(">I")
_FORMAT = 2


def encode_node(windows: NodeWindows) -> bytes:
    state = as_state(windows)
    header = {
        "format": _FORMAT,
        "node": state.node,
        "uuids": state.uuids,
        "index": state.index,
        "model": state.model,
        "mem_total_bytes": state.mem_total_bytes,
        "kept_rows": state.kept.shape[1],
        "recent_rows": state.recent.shape[1],
    }
    encoded = orjson.dumps(header)
    return b"".join(
        [
            _HEADER_LENGTH.pack(len(encoded)),
            encoded,
            np.ascontiguousarray(state.kept, dtype="<f8").tobytes(),
            np.ascontiguousarray(state.recent, dtype="<f8").tobytes(),
            np.ascontiguousarray(state.filtered, dtype="<f8").tobytes(),
            np.ascontiguousarray(state.emitted, dtype="<f8").tobytes(),
            np.ascontiguousarray(state.last_ecc, dtype="<i8").tobytes(),
        ]
    )


def decode_node(data: bytes) -> NodeState:
    """The node's state; its arrays are read-only views of ``data``."""
    (length,) = _HEADER_LENGTH.unpack_from(data)
    start = _HEADER_LENGTH.size
    header = orjson.loads(data[start : start + length])
    offset = start + length
    if header.get("format") == 1:
        return as_state(_decode_v1(header, data, offset))
    if header.get("format") != _FORMAT:
        raise NodeRowFormatError(f"unknown node-row format {header.get('format')!r}")
    gpus = len(header["uuids"])
    shapes = {
        "kept": ("<f8", (gpus, header["kept_rows"], len(KEPT_COLUMNS))),
        "recent": ("<f8", (gpus, header["recent_rows"], len(RECENT_COLUMNS))),
        "filtered": ("<f8", (gpus, len(COMPONENTS))),
        "emitted": ("<f8", (gpus, len(EMITTED_COLUMNS))),
        "last_ecc": ("<i8", (gpus,)),
    }
    arrays: dict[str, Any] = {}
    for name, (dtype, shape) in shapes.items():
        count = int(np.prod(shape))
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += arrays[name].nbytes
    return NodeState(
        node=header["node"],
        uuids=tuple(header["uuids"]),
        index=tuple(header["index"]),
        model=tuple(header["model"]),
        mem_total_bytes=tuple(header["mem_total_bytes"]),
        **arrays,
    )


def _recent_v1(rows: list[list[Any]]) -> FloatArray:
    """``[[ts_ms, [component or null, ...]], ...]`` as RECENT_COLUMNS rows (null: NaN)."""
    table = [[ts, *raw] for ts, raw in rows]
    return np.array(table, dtype=np.float64).reshape(len(table), len(RECENT_COLUMNS))


def _decode_v1(header: dict[str, Any], data: bytes, offset: int) -> dict[str, GpuWindow]:
    """Format 1: per GPU a JSON entry, then each GPU's kept rows in turn."""
    columns = len(KEPT_COLUMNS)
    windows: dict[str, GpuWindow] = {}
    for gpu in header["gpus"]:
        rows = gpu["rows"]
        kept = np.frombuffer(data, dtype="<f8", count=rows * columns, offset=offset)
        offset += kept.nbytes
        windows[gpu["uuid"]] = GpuWindow(
            node=gpu["node"],
            index=gpu["index"],
            model=gpu["model"],
            mem_total_bytes=gpu["mem_total_bytes"],
            kept=kept.reshape(rows, columns),
            recent=_recent_v1(gpu["recent"]),
            filtered=tuple(gpu["filtered"]),
            last_ecc=gpu["last_ecc"],
            emitted_score=gpu["emitted_score"],
            emitted_stale=gpu["emitted_stale"],
            emitted_at_ms=gpu["emitted_at_ms"],
        )
    return windows
