"""``fairlane run`` against a real scheduler process (uvicorn, Postgres, Kafka): the
scheduler, scores for a node of the test's own, the launcher as a process, and reading
what it said and published."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairlane.kafka_io import partition_of
from fairlane_events.codec import decode, encode
from fairlane_events.records import JobProgress, PlacementEvent
from fairlane_events.topics import JOB_PROGRESS, PLACEMENTS, STREAM_PARTITIONS
from tests.processes import free_port, service, wait_for_http
from tests.scheduler_harness import send_raw


@dataclass(frozen=True)
class Scheduler:
    url: str
    proc: subprocess.Popen[bytes]

    def placement(self, placement_id: str) -> dict[str, Any]:
        """The placement as the API answers it (JSON)."""
        answer = httpx.get(f"{self.url}/v1/placements/{placement_id}", timeout=10)
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body


@contextlib.contextmanager
def scheduler_process(kafka: str, database_url: str, log: Path) -> Iterator[Scheduler]:
    """The scheduler on a free port, ready (scores caught up, Postgres answering)."""
    port = free_port()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka,
        "DATABASE_URL": database_url,
        "FAIRLANE_AUTH_DISABLED": "true",
        "FAIRLANE_EXPIRY_INTERVAL_S": "0.5",
    }
    with service("fairlane_scheduler", ["--port", str(port)], env, log) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/readyz", proc, log)
        yield Scheduler(url, proc)


@dataclass
class Launcher:
    """A ``fairlane run`` process; its stdout and stderr (and its job's) go to ``log``."""

    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, needle: str, timeout_s: float = 60, *, after_exit: bool = False) -> str:
        """Until ``needle`` is in the log: the log. Fails at once if the launcher exits
        first, unless ``after_exit`` (its orphaned job may still write)."""
        deadline = time.monotonic() + timeout_s
        while needle not in (text := self.text()):
            exited = self.proc.poll() is not None and not after_exit
            if exited and needle not in self.text():
                raise AssertionError(f"launcher exited {self.proc.returncode} first:\n{text}")
            assert time.monotonic() < deadline, f"{needle!r} not seen:\n{text}"
            time.sleep(0.1)
        return text

    def placement_id(self) -> str:
        line = next(
            ln for ln in self.wait_for("fairlane: placed ").splitlines() if " placed " in ln
        )
        return line.split(" placed ", 1)[1].split(":", 1)[0]

    def exit_code(self, timeout_s: float = 60) -> int:
        return self.proc.wait(timeout_s)


@contextlib.contextmanager
def launcher(
    args: list[str], env: dict[str, str], log: Path, verb: str = "run"
) -> Iterator[Launcher]:
    """``python -m fairlane VERB ARGS`` with ``env``; killed (and its job) if still running."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fairlane", verb, *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Launcher(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not in {timeout_s} s"
        time.sleep(0.2)


async def published_progress(bootstrap: str, placement_id: str) -> list[JobProgress]:
    """The placement's progress records on the topic now, read from its key's partition."""
    key = placement_id.encode()
    tp = TopicPartition(JOB_PROGRESS, partition_of(key, STREAM_PARTITIONS))
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        found: list[JobProgress] = []
        while await consumer.position(tp) < end:
            for message in (await consumer.getmany(tp, timeout_ms=500)).get(tp, ()):
                if message.key == key:
                    found.append(decode(JobProgress, message.value))
        return found
    finally:
        await consumer.stop()


async def publish_event(bootstrap: str, event: PlacementEvent) -> None:
    """One placement event, keyed by its placement id as the scheduler's outbox does."""
    await send_raw(bootstrap, PLACEMENTS, encode(event), event.placement_id.encode())
