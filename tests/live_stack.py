"""The whole pipeline as processes for the browser and Prometheus tests: the agent
(a simulated fleet following a scenario), the scorer and the scheduler, each a real
``python -m`` child on real Kafka and Postgres, with their HTTP ports known."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.node_keys import SIGNING_ENV
from tests.processes import free_port, service, wait_for_http
from tests.servers import ROOT

TOKEN = "live-stack-admin-token"


def debian_tool(name: str) -> str:
    """The path of ``chromium``, ``prometheus`` or ``promtool``: Debian's package,
    installed by scripts/debian-tool.sh when missing (never a browser download)."""
    found = subprocess.run(
        [str(ROOT / "scripts/debian-tool.sh"), name], check=True, capture_output=True, text=True
    )
    return found.stdout.strip()


def pipeline_env(
    kafka_bootstrap: str, prefix: str, tmp: Path
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment of every service of a test stack (one sample a second), and the
    scorer's on top: its own consumer group and data dir, and a free web port."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FAIRLANE_INTERVAL_S": "1",
        "FAIRLANE_HEARTBEAT_S": "5",
        **SIGNING_ENV,  # the agent signs, the scorer verifies
    }
    scorer_env = {
        **env,
        "FAIRLANE_APP_ID": f"scorer-{prefix}",
        "FAIRLANE_WEB_PORT": str(free_port()),
        "FAIRLANE_DATA_DIR": str(tmp / "scorer-data"),
    }
    return env, scorer_env


@dataclass(frozen=True)
class LiveStack:
    url: str  # the scheduler's API (and /dashboard, /metrics)
    scorer_url: str
    agent_metrics_url: str
    token: str
    prefix: str  # node-name prefix of the simulated fleet: nodes are <prefix>-0000 ...

    def node(self, n: int) -> str:
        return f"{self.prefix}-{n:04d}"

    def wait_for_free_gpus(self, count: int, timeout_s: float = 90) -> None:
        """Until this stack's fleet has ``count`` free GPUs in the scheduler's view: the
        stack is up once the agent answers, its first scores come after (the scorer may
        still be reading the session's earlier samples)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            nodes = httpx.get(f"{self.url}/v1/nodes", headers=headers).json()
            if sum(n["free"] for n in nodes if n["node"].startswith(self.prefix)) >= count:
                return
            time.sleep(1)
        raise AssertionError(f"the scheduler never saw {count} free GPUs: {nodes}")


@contextlib.contextmanager
def live_stack(
    kafka_bootstrap: str,
    database_url: str,
    tmp: Path,
    prefix: str,
    scenario: str,
    scorer_settings: dict[str, str] | None = None,
    agent_flags: Sequence[str] = (),
    scheduler_settings: dict[str, str] | None = None,
) -> Iterator[LiveStack]:
    """Scorer and scheduler first; the agent once the scheduler answers, so the
    scheduler sees the fleet from its first sample. ``scorer_settings``: more of the
    scorer's environment (a shorter history window, say); ``agent_flags``: more of the
    agent's flags (slow GPUs, say); ``scheduler_settings``: more of the scheduler's
    environment (a shorter idle window, say)."""
    (tmp / "scenario.toml").write_text(scenario)
    api_port, agent_port = free_port(), free_port()
    env, scorer_env = pipeline_env(kafka_bootstrap, prefix, tmp)
    scorer_env |= scorer_settings or {}
    scorer_port = scorer_env["FAIRLANE_WEB_PORT"]
    scheduler_env = {
        **env,
        "DATABASE_URL": database_url,
        "FAIRLANE_ADMIN_TOKEN": TOKEN,
        "FAIRLANE_STALE_AFTER_S": "30",
        "FAIRLANE_STABILIZATION_S": "60",
        **(scheduler_settings or {}),
    }
    agent_args = ["--node-prefix", prefix, "--scenario", str(tmp / "scenario.toml")]
    agent_args += ["--seed", "3", "--metrics-port", str(agent_port), "--backend", "sim"]
    agent_args += agent_flags
    scheduler_args = ["--port", str(api_port)]
    with (
        service("fairlane_scorer", [], scorer_env, tmp / "scorer.log") as scorer,
        service("fairlane_scheduler", scheduler_args, scheduler_env, tmp / "sched.log") as sched,
    ):
        scorer_url, url = f"http://127.0.0.1:{scorer_port}", f"http://127.0.0.1:{api_port}"
        wait_for_http(f"{scorer_url}/healthz", scorer, tmp / "scorer.log")
        wait_for_http(f"{url}/healthz", sched, tmp / "sched.log")
        with service("fairlane_agent", agent_args, env, tmp / "agent.log") as agent:
            metrics = f"http://127.0.0.1:{agent_port}/metrics"
            wait_for_http(metrics, agent, tmp / "agent.log")
            yield LiveStack(url, scorer_url, metrics, TOKEN, prefix)
