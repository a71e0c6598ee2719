"""A ``degraded`` placement event, as the job sees it: a file and a signal.

The launcher writes the event's slow GPUs to the file named by
``FAIRLANE_DEGRADED_FILE`` (atomically: a reader never sees half a file), then sends the
configured signal (default SIGUSR1) to every process of the job that *handles* it. A
process that does not handle it is left alone, because SIGUSR1's default action ends
the process: torchrun, which does not handle it, survives, while its workers that
installed a handler get it. On Linux "handles" is read from ``SigCgt`` in
``/proc/PID/status``; the job's processes are the child and its descendants.

The file (JSON)::

    {"placement_id": "...", "ts_ms": 1760000000000,
     "slow_gpus": [{"uuid": "GPU-...", "node": "n1", "speed": 0.62, "source": "learned"}]}

A job reads it with :func:`read_slow_gpus`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import orjson

from fairlane.env import DEGRADED_FILE
from fairlane_events.records import PlacementEvent, SlowGpu

__all__ = ["has_handler", "notify_handlers", "read_slow_gpus", "write_degraded"]

_PROC = Path("/proc")


def write_degraded(path: Path, event: PlacementEvent) -> None:
    """The event's slow GPUs to ``path``, replaced in one rename."""
    body = {
        "placement_id": event.placement_id,
        "ts_ms": event.ts_ms,
        "slow_gpus": [g.model_dump(mode="json") for g in event.slow_gpus or ()],
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(orjson.dumps(body))
    tmp.replace(path)


def read_slow_gpus(path: str | Path | None = None) -> list[SlowGpu]:
    """The slow GPUs of the latest degraded event (``FAIRLANE_DEGRADED_FILE`` by default);
    empty when there was none."""
    where = path if path is not None else os.environ.get(DEGRADED_FILE)
    if not where:
        return []
    try:
        raw = orjson.loads(Path(where).read_bytes())
    except FileNotFoundError:
        return []
    return [SlowGpu.model_validate(g) for g in raw["slow_gpus"]]


def _children(pid: int) -> Iterator[int]:
    """Direct children of ``pid`` (Linux's per-task ``children`` lists)."""
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return
    for task in tasks:
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        yield from (int(c) for c in text.split())


def _tree(root: int) -> list[int]:
    seen, todo = [root], [root]
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.append(child)
                todo.append(child)
    return seen


def has_handler(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler installed for ``signum`` (``SigCgt``)."""
    try:
        status = (_PROC / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def notify_handlers(root: int, signum: signal.Signals) -> list[int]:
    """Send ``signum`` to every process of ``root``'s tree that handles it: their pids."""
    sent = []
    for pid in _tree(root):
        if has_handler(pid, signum):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                continue
            sent.append(pid)
    return sent
