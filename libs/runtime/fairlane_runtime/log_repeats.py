"""A log filter that lets a repeated message through once per window, not once per retry.

aiokafka logs every failed reconnect and metadata refresh while a broker is away, tens a
second per client: one 15 s outage wrote some 3,000 lines per scheduler replica. The
filter passes the first record of each (logger, message template) and drops the same
template until ``window_s`` has passed; the next one that passes says how many were
dropped. Different messages (the broker back, a real error) are never held back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RepeatFilter"]


class RepeatFilter(logging.Filter):
    def __init__(
        self, prefix: str, window_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._prefix = prefix
        self._window_s = window_s
        self._clock = clock
        self._passed: dict[tuple[str, str], tuple[float, int]] = {}  # -> (when, dropped since)

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self._prefix):
            return True
        key, now = (record.name, str(record.msg)), self._clock()
        last = self._passed.get(key)
        if last is not None and now - last[0] < self._window_s:
            self._passed[key] = (last[0], last[1] + 1)
            return False
        self._passed[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} ({last[1]} like this in the last {now - last[0]:.0f} s)"
        return True
