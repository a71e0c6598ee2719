"""Every default listening port stays below Linux's ephemeral range (32768-60999): a
listener there can find its port briefly owned by some outgoing connection and fail
with "Address already in use" (it happened to dev Postgres on 55432)."""

import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from fairlane_agent.settings import AgentSettings
from fairlane_scheduler.settings import SchedulerSettings
from fairlane_scorer.settings import ScorerSettings
from tests.node_keys import TEST_KEY_RING

ROOT = Path(__file__).resolve().parents[2]
EPHEMERAL_FIRST = 32768

# `${KAFKA_PORT:-19092}`, `PG_PORT (25432)`, `"127.0.0.1:25432:5432"`, `127.0.0.1:19092`
_SHELL_DEFAULT = re.compile(r"_PORT(?::-|\", \")(\d+)")  # shell ${X_PORT:-N}, env default
_LOCAL_ADDRESS = re.compile(r"127\.0\.0\.1:(\d{4,5})")
FILES = [
    "scripts/kafka.sh",
    "scripts/postgres.sh",
    "scripts/stack.sh",
    "docker-compose.yml",
    "docs/deploy.md",
    "docs/architecture.md",
    "docs/benchmarks.md",
    "docs/benchmarks-history.md",
    "bench/agent_publish.py",
    "bench/scheduler_place.py",
    "bench/scorer_throughput.py",
    "tests/servers.py",
    "libs/runtime/fairlane_runtime/settings.py",
    "services/scheduler/fairlane_scheduler/settings.py",
]


@pytest.mark.parametrize("name", FILES)
def test_ports_written_in_scripts_docs_and_benchmarks_are_not_ephemeral(name: str) -> None:
    text = (ROOT / name).read_text()
    ports = [int(p) for p in _SHELL_DEFAULT.findall(text) + _LOCAL_ADDRESS.findall(text)]
    assert ports or name.startswith("docs/"), f"no port found in {name}"
    assert all(p < EPHEMERAL_FIRST for p in ports), (name, ports)


def test_service_and_test_server_defaults_are_not_ephemeral() -> None:
    scheduler = SchedulerSettings(auth_disabled=True)
    database_port = int(scheduler.database_url.get_secret_value().rsplit(":", 1)[1].split("/")[0])
    defaults = {
        "scheduler": scheduler.port,
        "scheduler database": database_port,
        "scorer": ScorerSettings(sample_key_ring_file=TEST_KEY_RING).web_port,
        "agent": AgentSettings().metrics_port,
    }
    assert all(p < EPHEMERAL_FIRST for p in defaults.values()), defaults
    assert isinstance(scheduler.database_url, SecretStr)


def test_the_live_evaluations_own_servers_listen_below_the_ephemeral_range() -> None:
    text = (ROOT / "eval/fairlane_eval/live.py").read_text()
    ports = [int(p) for p in re.findall(r'"--[a-z]+-port", type=int, default=(\d+)', text)]
    assert len(ports) == 2
    assert all(p < EPHEMERAL_FIRST for p in ports), ports
