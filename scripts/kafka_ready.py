"""Wait until a Kafka broker answers metadata requests (used by scripts/kafka.sh).

Usage: kafka_ready.py BOOTSTRAP [--timeout SECONDS] [--pid PID]

Retries an aiokafka admin-client ``list_topics`` call with short request
timeouts until it succeeds and the broker list is non-empty.
Exit codes: 0 ready, 1 timed out, 2 the watched process (--pid) exited.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time

from aiokafka.admin import AIOKafkaAdminClient


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited but not yet reaped process (zombie) counts as dead
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


async def _probe(bootstrap: str) -> int:
    """Return the number of topics; raise if the broker is not usable yet."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=2000, retry_backoff_ms=100
    )
    try:
        await asyncio.wait_for(admin.start(), 5)
        topics = await asyncio.wait_for(admin.list_topics(), 5)
        cluster = await asyncio.wait_for(admin.describe_cluster(), 5)
        if not cluster.get("brokers"):
            raise RuntimeError("metadata has no brokers yet")
        return len(topics)
    finally:
        await admin.close()


async def _wait(bootstrap: str, budget_s: float, pid: int | None) -> int:
    start = time.monotonic()
    last_error: BaseException | None = None
    while time.monotonic() - start < budget_s:
        if not _alive(pid):
            print(f"kafka_ready: process {pid} exited", file=sys.stderr)
            return 2
        try:
            n = await _probe(bootstrap)
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last_error = exc
            await asyncio.sleep(0.5)
            continue
        elapsed = time.monotonic() - start
        print(f"kafka_ready: {bootstrap} ready after {elapsed:.1f}s ({n} topics)")
        return 0
    print(
        f"kafka_ready: {bootstrap} not ready after {budget_s:.0f}s (last error: {last_error!r})",
        file=sys.stderr,
    )
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap", help="host:port, e.g. 127.0.0.1:19092")
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--pid", type=int, default=None, help="give up if this pid exits")
    args = parser.parse_args()
    # aiokafka logs every refused connection at ERROR; expected while starting.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    return asyncio.run(_wait(args.bootstrap, args.timeout, args.pid))


if __name__ == "__main__":
    sys.exit(main())
