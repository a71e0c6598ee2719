"""scripts/kafka.sh runs the broker of an existing KAFKA_HOME: a directory laid out as
Apache's binary release (bin/, config/, libs/), whose jars are the real ones kafka.sh
caches for its Maven path. Its own ports and state directory: no shared broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka_release import kafka_sh, lay_out_release
from tests.processes import free_port

pytestmark = pytest.mark.integration


def test_kafka_sh_runs_the_broker_of_a_kafka_home_whatever_kafka_version_says(
    tmp_path: Path,
) -> None:
    cached = kafka_sh("libs", env={"KAFKA_HOME": "", "KAFKA_VERSION": "3.9.1"}, timeout_s=600)
    assert cached.returncode == 0, cached.stderr
    home = lay_out_release(tmp_path / "kafka_2.13-3.9.1", "3.9.1", Path(cached.stdout.strip()))
    env = {
        "KAFKA_HOME": str(home),
        "KAFKA_VERSION": "4.0.0",  # the release's own version wins
        "KAFKA_PORT": str(free_port()),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        "FAIRLANE_STATE_DIR": str(tmp_path / "state"),
    }
    try:
        up = kafka_sh("up", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"kafka.sh: Kafka 3.9.1 from KAFKA_HOME={home}\n" in up.stderr
        assert "running (pid" in up.stdout
        pid = up.stdout.rsplit("running (pid ", 1)[1].split(")")[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert f"{home}/libs/*".encode() in cmdline  # the release's jars, nothing else
        status = kafka_sh("status", env=env)
        assert status.returncode == 0, status.stdout
    finally:
        down = kafka_sh("down", "--purge", env=env)
    assert down.returncode == 0, down.stderr
