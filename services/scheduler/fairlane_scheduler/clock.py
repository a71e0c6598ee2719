"""The scheduler's one wall clock. Core code takes ``now_ms`` as an argument; the edges
read it here."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)
