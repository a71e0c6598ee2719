"""`make run` (scripts/stack.sh up) that fails half-way stops what it had started: here
Postgres cannot start (its port is taken), so the Kafka it started goes down again."""

import os
import socket
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Ports of this test only (the fixtures' servers and a `make run` stack keep theirs).
KAFKA_PORT = os.environ.get("FAIRLANE_TEST_STACK_KAFKA_PORT", "29296")
PG_PORT = os.environ.get("FAIRLANE_TEST_STACK_PG_PORT", "25439")


def test_a_failed_start_stops_the_kafka_it_started(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "KAFKA_PORT": KAFKA_PORT,
        "PG_PORT": PG_PORT,
        "FAIRLANE_STATE_DIR": str(tmp_path),
        "FAIRLANE_CACHE_DIR": str(ROOT / ".local" / "cache"),  # the jars, not the state
        "DETACH": "1",
    }
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(PG_PORT)))
        squatter.listen()
        done = subprocess.run(
            [str(ROOT / "scripts" / "stack.sh"), "up"],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    try:
        assert done.returncode != 0
        assert "stopping what this run started: kafka" in done.stderr, done.stderr
        status = subprocess.run(
            [str(ROOT / "scripts" / "kafka.sh"), "status"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert status.returncode == 3, status.stderr  # not running
    finally:
        subprocess.run(
            [str(ROOT / "scripts" / "kafka.sh"), "down", "--purge"], env=env, check=False
        )
