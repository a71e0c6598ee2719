"""The real Fairlane stack for the Kubernetes tests: a simulated fleet (the agent with a
scenario), the scorer and the scheduler as processes on real Kafka and Postgres, the
scheduler on the port where the session's kube-scheduler expects its extender and
talking to that control plane. The scheduler can be stopped and started again.

:func:`stack_fixture` is the one fixture every Kubernetes test module builds its stack
with: its scenario on the session's servers, a database of its own, and the fleet's
first scores waited for."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.kube import ControlPlane, Kube, wait_for
from tests.live_stack import pipeline_env
from tests.processes import service, wait_for_http
from tests.servers import create_database, drop_database

TOKEN = "k8s-test-admin-token"


class FairlaneStack:
    def __init__(self, plane: ControlPlane, prefix: str, env: dict[str, str], log: Path) -> None:
        self.kube: Kube = plane.client()
        self.url = f"http://127.0.0.1:{plane.extender_port}"
        self.prefix = prefix
        self._env = env
        self._log = log
        self._port = plane.extender_port
        self._proc: subprocess.Popen[bytes] | None = None

    def node(self, n: int) -> str:
        return f"{self.prefix}-{n:04d}"

    def start_scheduler(self) -> None:
        with self._log.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "fairlane_scheduler", "--port", str(self._port)],
                env={**os.environ, **self._env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for_http(f"{self.url}/healthz", self._proc, self._log)

    def stop_scheduler(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(30)
            self._proc = None

    def api(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.get(f"{self.url}{path}", headers=headers, timeout=5).json()

    def gpu_states(self, n: int) -> dict[str, int]:
        for summary in self.api("/v1/nodes"):
            if summary["node"] == self.node(n):
                return dict(summary["states"])
        return {}


@contextlib.contextmanager
def fairlane_stack(
    plane: ControlPlane,
    kafka_bootstrap: str,
    database_url: str,
    tmp: Path,
    prefix: str,
    scenario: str,
    scheduler_settings: dict[str, str] | None = None,
) -> Iterator[FairlaneStack]:
    """Scores forget after 15 s and GPUs cool for 15 s, so a throttled node is back
    within about a minute of its throttling's end."""
    (tmp / "scenario.toml").write_text(scenario)
    env, scorer_env = pipeline_env(kafka_bootstrap, prefix, tmp)
    scorer_env |= {"FAIRLANE_HISTORY_S": "15", "FAIRLANE_RECENT_WINDOW_S": "8"}
    scheduler_env = {
        **env,
        "DATABASE_URL": database_url,
        "FAIRLANE_ADMIN_TOKEN": TOKEN,
        "FAIRLANE_STALE_AFTER_S": "30",
        "FAIRLANE_STABILIZATION_S": "15",
        "FAIRLANE_KUBE_API_URL": plane.url,
        "FAIRLANE_KUBE_TOKEN_FILE": str(plane.token_file),
        "FAIRLANE_KUBE_CA_FILE": str(plane.ca_file),
        **(scheduler_settings or {}),
    }
    agent_args = ["--node-prefix", prefix, "--scenario", str(tmp / "scenario.toml")]
    agent_args += ["--seed", "5", "--metrics-port", "0", "--backend", "sim"]
    stack = FairlaneStack(plane, prefix, scheduler_env, tmp / "sched.log")
    with service("fairlane_scorer", [], scorer_env, tmp / "scorer.log") as scorer:
        scorer_url = f"http://127.0.0.1:{scorer_env['FAIRLANE_WEB_PORT']}/healthz"
        wait_for_http(scorer_url, scorer, tmp / "scorer.log")
        stack.start_scheduler()
        try:
            with service("fairlane_agent", agent_args, env, tmp / "agent.log"):
                yield stack
        finally:
            stack.stop_scheduler()


def stack_fixture(
    prefix: str, scenario: str, scheduler_settings: dict[str, str] | None = None
) -> Callable[..., Iterator[FairlaneStack]]:
    """A module-scoped fixture named ``fairlane`` (assign it to that name): the stack of
    ``scenario`` (node names ``<prefix>-<pid>-NNNN``) on the session's control plane and
    Kafka, with a fresh database, once the scheduler knows every GPU of the fleet."""
    fleet = tomllib.loads(scenario)["fleet"]

    @pytest.fixture(scope="module", name="fairlane")
    def fixture(
        kube_plane: ControlPlane,
        kafka_bootstrap: str,
        postgres_dsn: str,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[FairlaneStack]:
        tmp, nodes = tmp_path_factory.mktemp(prefix), f"{prefix}-{os.getpid()}"
        database_url = asyncio.run(create_database(postgres_dsn))
        try:
            with fairlane_stack(
                kube_plane, kafka_bootstrap, database_url, tmp, nodes, scenario, scheduler_settings
            ) as stack:

                def scored() -> bool:
                    known = {s["node"]: s["gpus"] for s in stack.api("/v1/nodes")}
                    wanted = range(fleet["nodes"])
                    return all(known.get(stack.node(n)) == fleet["gpus_per_node"] for n in wanted)

                wait_for("the fleet's first scores", scored, 120)
                yield stack
        finally:
            asyncio.run(drop_database(postgres_dsn, database_url))

    return fixture
