"""A real kube-scheduler (v1.37, deploy/'s KubeSchedulerConfiguration) asks the real
Fairlane stack — a simulated fleet, the scorer and the scheduler as processes on real
Kafka and Postgres — where GPU pods may go, and Fairlane binds them (bind verb).

The fleet: node 0 has 8 GPUs of which 3 throttle for the whole run (5 qualify); node 1's
4 GPUs throttle for the first 40 s, then recover; a third Node has no Fairlane scores.
The tests run in order on one stack (module scope), each leaving no pod behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.kube import ControlPlane, Kube, wait_for
from tests.live_stack import pipeline_env
from tests.processes import service, wait_for_http

TOKEN = "k8s-test-admin-token"
SCENARIO = """
name = "k8s: a hot corner and a node that recovers"

[fleet]
nodes = 2
gpus_per_node = 8
models = ["H100"]
degraded_fraction = 0.0

[[events]]
kind = "thermal"
nodes = [0]
gpus = [5, 6, 7]
start_s = 0
ramp_s = 1
clock_factor = 0.3

[[events]]
kind = "thermal"
nodes = [1]
start_s = 0
duration_s = 40
ramp_s = 1
clock_factor = 0.3
"""


@dataclass
class Stack:
    kube: Kube
    url: str  # Fairlane's API
    prefix: str
    scheduler: subprocess.Popen[bytes] | None
    start_scheduler: object  # () -> Popen, on kube-scheduler's extender port

    def node(self, n: int) -> str:
        return f"{self.prefix}-{n:04d}"

    def gpu_states(self, n: int) -> dict[str, int]:
        answer = httpx.get(
            f"{self.url}/v1/nodes", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
        )
        for summary in answer.json():
            if summary["node"] == self.node(n):
                return dict(summary["states"])
        return {}


@pytest.fixture(scope="module")
def stack(
    kube_plane: ControlPlane,
    kafka_bootstrap: str,
    postgres_dsn: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("k8s")
    prefix = f"k8s-{os.getpid()}"
    (tmp / "scenario.toml").write_text(SCENARIO)
    env, scorer_env = pipeline_env(kafka_bootstrap, prefix, tmp)
    scorer_env |= {"FAIRLANE_HISTORY_S": "15", "FAIRLANE_RECENT_WINDOW_S": "8"}
    port = kube_plane.extender_port
    scheduler_env = {
        **env,
        "DATABASE_URL": postgres_dsn,
        "FAIRLANE_ADMIN_TOKEN": TOKEN,
        "FAIRLANE_STALE_AFTER_S": "30",
        "FAIRLANE_STABILIZATION_S": "15",
        "FAIRLANE_KUBE_API_URL": kube_plane.url,
        "FAIRLANE_KUBE_TOKEN_FILE": str(kube_plane.token_file),
        "FAIRLANE_KUBE_CA_FILE": str(kube_plane.ca_file),
    }
    log = tmp / "sched.log"

    def start_scheduler() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [os.sys.executable, "-m", "fairlane_scheduler", "--port", str(port)],  # type: ignore[attr-defined]
                env={**os.environ, **scheduler_env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for_http(f"http://127.0.0.1:{port}/healthz", proc, log)
        return proc

    kube = kube_plane.client()
    for n, gpus in ((0, 8), (1, 8), (2, 8)):
        kube.gpu_node(f"{prefix}-{n:04d}", gpus)
    agent_args = ["--node-prefix", prefix, "--scenario", str(tmp / "scenario.toml")]
    agent_args += ["--seed", "5", "--metrics-port", "0", "--backend", "sim"]
    with service("fairlane_scorer", [], scorer_env, tmp / "scorer.log") as scorer:
        wait_for_http(
            f"http://127.0.0.1:{scorer_env['FAIRLANE_WEB_PORT']}/healthz",
            scorer,
            tmp / "scorer.log",
        )
        scheduler = start_scheduler()
        stack = Stack(kube, f"http://127.0.0.1:{port}", prefix, scheduler, start_scheduler)
        try:
            with service("fairlane_agent", agent_args, env, tmp / "agent.log"):
                # Node 0: 5 qualifying GPUs, node 1: none (throttled), before any pod.
                wait_for(
                    "the fleet's first scores",
                    lambda: (
                        stack.gpu_states(0).get("free") == 5
                        and stack.gpu_states(1).get("free", 0) == 0
                        and stack.gpu_states(1)
                    ),
                    120,
                )
                yield stack
        finally:
            if stack.scheduler is not None:
                stack.scheduler.send_signal(signal.SIGTERM)
                stack.scheduler.wait(30)


def bound(kube: Kube, names: list[str]) -> dict[str, str]:
    return {n: node for n in names if (node := kube.node_of(n)) is not None}


def test_gpu_pods_go_only_where_fairlane_passes_and_never_over_commit(stack: Stack) -> None:
    """The reproduction: node 0 counts 8 GPUs in Kubernetes, 5 in Fairlane; four 2-GPU
    pods: two are bound there, none anywhere else, and the others wait, saying why."""
    kube, names = stack.kube, [f"burst-{i}" for i in range(4)]
    for name in names:
        kube.pod(name, gpus=2)

    def two_bound() -> dict[str, str] | None:
        found = bound(kube, names)
        return found if len(found) == 2 else None

    placed = wait_for("two bindings", two_bound)
    assert set(placed.values()) == {stack.node(0)}
    waiting = [n for n in names if n not in placed]
    for name in waiting:
        message = wait_for("a FailedScheduling condition", lambda n=name: kube.unschedulable(n))
        assert "held by Kubernetes pods" in message, message  # node 0: its GPUs are taken
        assert "no GPU scores from Fairlane" in message, message  # node 2
        assert "score" in message or "cooling" in message, message  # node 1, throttled
    assert len(bound(kube, names)) == 2  # still, after every pod was judged again
    # A pod that ends gives its GPUs back: one waiting pod takes them.
    kube.delete_pod(next(iter(placed)))
    wait_for("the freed GPUs taken", lambda: len(bound(kube, waiting)) == 1, 30)
    for name in names:
        kube.delete_pod(name)


def test_a_throttled_node_is_avoided_until_it_recovers(stack: Stack) -> None:
    kube = stack.kube
    kube.pod("big-0", gpus=4)
    why = lambda: (kube.unschedulable("big-0"), stack.gpu_states(0))  # noqa: E731
    assert wait_for("big-0 bound", lambda: kube.node_of("big-0"), why=why) == stack.node(0)
    kube.pod("big-1", gpus=4)  # node 0 has 1 qualifying GPU left, node 1 is held out
    message = wait_for("big-1 refused", lambda: kube.unschedulable("big-1"))
    assert "score" in message or "cooling" in message, message
    wait_for("node 1 readmitted", lambda: stack.gpu_states(1).get("free") == 8, 150)
    kube.delete_pod("big-1")
    kube.pod("big-2", gpus=4)
    assert wait_for("big-2 bound", lambda: kube.node_of("big-2")) == stack.node(1)
    kube.delete_pod("big-0")
    kube.delete_pod("big-2")


def test_with_fairlane_down_gpu_pods_wait_and_schedule_when_it_returns(stack: Stack) -> None:
    kube = stack.kube
    assert stack.scheduler is not None
    stack.scheduler.send_signal(signal.SIGTERM)
    stack.scheduler.wait(30)
    stack.scheduler = None
    kube.pod("web", gpus=0)  # asks for no GPU: never sent to the extender
    kube.pod("train", gpus=2)
    assert wait_for("web bound without Fairlane", lambda: kube.node_of("web"))
    message = wait_for("train refused", lambda: kube.unschedulable("train"))
    assert message.startswith("SchedulerError"), message
    assert "extender" in message.lower() or "connection refused" in message, message
    events = kube.events_of("train")
    assert any(e["reason"] == "FailedScheduling" for e in events), events
    assert kube.node_of("train") is None
    stack.scheduler = stack.start_scheduler()  # type: ignore[operator]
    assert wait_for("train bound after Fairlane returned", lambda: kube.node_of("train"), 60) in (
        stack.node(0),
        stack.node(1),
    )
    kube.delete_pod("web")
    kube.delete_pod("train")
