"""One table row per node: the windows of all its GPUs, as compact bytes (pure).

Every GPU of a node arrives in the node's record, so one row per node means one table
write and one changelog message per record instead of one per GPU. The encoding is a
length-prefixed JSON header (the small per-GPU fields) followed by the float64 rows each
GPU keeps (``GpuWindow.kept``): exact, and about 32 bytes per kept sample.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from fairlane_scorer.core.window import RECENT_COLUMNS, FloatArray, GpuWindow
from fairlane_scorer.errors import NodeRowFormatError
from fairlane_scoring.reference import KEPT_COLUMNS

__all__ = ["NodeWindows", "decode_node", "encode_node"]

#: GPU uuid -> its window, for one node.
NodeWindows = Mapping[str, GpuWindow]

_HEADER_LENGTH = struct.Struct(">I")
_FORMAT = 1


def encode_node(windows: NodeWindows) -> bytes:
    header = {
        "format": _FORMAT,
        "gpus": [
            {
                "uuid": uuid,
                "node": w.node,
                "index": w.index,
                "model": w.model,
                "mem_total_bytes": w.mem_total_bytes,
                "rows": len(w.kept),
                "recent": [[row[0], row[1:]] for row in w.recent.tolist()],  # NaN: null
                "filtered": w.filtered,
                "last_ecc": w.last_ecc,
                "emitted_score": w.emitted_score,
                "emitted_stale": w.emitted_stale,
                "emitted_at_ms": w.emitted_at_ms,
            }
            for uuid, w in windows.items()
        ],
    }
    encoded = orjson.dumps(header)
    body = b"".join(np.ascontiguousarray(w.kept, dtype="<f8").tobytes() for w in windows.values())
    return _HEADER_LENGTH.pack(len(encoded)) + encoded + body


def _recent(rows: list[list[Any]]) -> FloatArray:
    """``[[ts_ms, [component or null, ...]], ...]`` as RECENT_COLUMNS rows (null: NaN)."""
    table = [[ts, *raw] for ts, raw in rows]
    return np.array(table, dtype=np.float64).reshape(len(table), len(RECENT_COLUMNS))


def decode_node(data: bytes) -> dict[str, GpuWindow]:
    """The node's windows; their ``kept`` arrays are read-only views of ``data``."""
    (length,) = _HEADER_LENGTH.unpack_from(data)
    start = _HEADER_LENGTH.size
    header = orjson.loads(data[start : start + length])
    if header.get("format") != _FORMAT:
        raise NodeRowFormatError(f"unknown node-row format {header.get('format')!r}")
    offset = start + length
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
            recent=_recent(gpu["recent"]),
            filtered=tuple(gpu["filtered"]),
            last_ecc=gpu["last_ecc"],
            emitted_score=gpu["emitted_score"],
            emitted_stale=gpu["emitted_stale"],
            emitted_at_ms=gpu["emitted_at_ms"],
        )
    return windows
