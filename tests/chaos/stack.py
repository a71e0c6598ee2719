"""The chaos suite's own stack: Kafka and Postgres from the project's scripts on the
suite's ports, the scorer, three scheduler replicas and a simulated fleet, each a real
process the scenarios may stop, kill -9 and start again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from fairlane_runtime.kafka import ensure_topics
from tests.chaos.logdirs import bound_changelogs, place_changelogs
from tests.node_keys import SIGNING_ENV
from tests.processes import spawn, stop, wait_for_http
from tests.servers import local_server, server_script

__all__ = ["ChaosPorts", "ChaosStack", "Service", "chaos_stack"]

TOKEN = "chaos-admin-token"
REPLICAS = 3
#: The fleet: nodes cycle through these models, so a third of them are V100s, which the
#: load never asks for: their scores carry no placement and the reference needs none.
MODELS = ("A100-80GB", "H100", "V100")
UNPLACED_MODEL = "V100"
#: The disk scenario's filesystem under the changelogs: room for what they hold live
#: (logdirs.py keeps them compacted) many times over, small enough to fill in a second.
SMALL_FS_MIB = 256
#: The scorer's replay tolerance here (its default is 300 s): the replay row's record
#: must be older than its node's newest by more than this, and at 300 s a short run's
#: oldest record is not. Far above what a restart redelivers (the commit interval, a few
#: seconds), so the scorer's kill stays a redelivery.
REPLAY_TOLERANCE_S = 30


@dataclass(frozen=True)
class ChaosPorts:
    """Every listening port of the suite, below 32768 (the kernel's ephemeral range
    starts there) and away from the dev and test defaults."""

    kafka: int = 29692
    postgres: int = 25933
    base: int = 28080  # scheduler replicas base.., then scorer, agents, relay

    @classmethod
    def from_env(cls) -> ChaosPorts:
        env = os.environ.get
        return cls(
            kafka=int(env("FAIRLANE_CHAOS_KAFKA_PORT", cls.kafka)),
            postgres=int(env("FAIRLANE_CHAOS_PG_PORT", cls.postgres)),
            base=int(env("FAIRLANE_CHAOS_PORT_BASE", cls.base)),
        )

    def scheduler(self, replica: int) -> int:
        return self.base + replica

    @property
    def scorer(self) -> int:
        return self.base + REPLICAS

    @property
    def agent(self) -> int:
        return self.base + REPLICAS + 1

    @property
    def partitioned_agent(self) -> int:
        return self.base + REPLICAS + 2

    @property
    def relay(self) -> int:
        return self.base + REPLICAS + 3


@dataclass
class Service:
    """One service process: started, killed and started again under the same name."""

    name: str
    module: str
    args: list[str]
    env: dict[str, str]
    log: Path
    ready_url: str | None
    prefix: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        self.proc = spawn(self.module, self.args, self.env, self.log, self.prefix)

    def wait_ready(self) -> None:
        if self.ready_url and self.proc is not None:
            wait_for_http(self.ready_url, self.proc, self.log, timeout_s=180)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop(self.proc)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


@dataclass
class ChaosStack:
    ports: ChaosPorts
    tmp: Path
    bootstrap: str
    database_url: str
    prefix: str  # the fleet's node-name prefix
    nodes: int
    gpus_per_node: int
    interval_s: float
    small_log_dir: Path | None = None  # a small filesystem, Kafka's second log dir
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def kafka_env(self) -> dict[str, str]:
        return kafka_env(self.ports, self.tmp, self.small_log_dir)

    @property
    def pg_env(self) -> dict[str, str]:
        return pg_env(self.ports, self.tmp)

    def api(self, replica: int) -> str:
        return f"http://127.0.0.1:{self.ports.scheduler(replica)}"

    @property
    def scorer_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.scorer}"

    @property
    def agent_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.agent}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def kafka(self, action: str) -> None:
        server_script("kafka.sh", action, env=self.kafka_env)

    def postgres(self, action: str) -> None:
        server_script("postgres.sh", action, env=self.pg_env)

    def server_pids(self) -> dict[str, int]:
        """The broker's and the postmaster's pids (for RSS sampling)."""
        pids = {}
        kafka_pid = self.tmp / f"kafka-{self.ports.kafka}" / "kafka.pid"
        with contextlib.suppress(OSError, ValueError):
            pids["kafka"] = int(kafka_pid.read_text().split()[0])
        pg_pid = self.tmp / f"postgres-{self.ports.postgres}" / "data" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            pids["postgres"] = int(pg_pid.read_text().split()[0])
        return pids

    def all_ready(self) -> bool:
        """Every replica ready (fresh scores, Postgres up)."""
        for replica in range(REPLICAS):
            try:
                if httpx.get(f"{self.api(replica)}/readyz", timeout=3).status_code != 200:
                    return False
            except httpx.HTTPError:
                return False
        return True


def kafka_env(ports: ChaosPorts, tmp: Path, small_log_dir: Path | None) -> dict[str, str]:
    env = {
        "KAFKA_PORT": str(ports.kafka),
        "KAFKA_CONTROLLER_PORT": str(ports.kafka + 1),
        "FAIRLANE_STATE_DIR": str(tmp),
    }
    if small_log_dir is not None:
        env["KAFKA_EXTRA_LOG_DIRS"] = str(small_log_dir)
    return env


@contextlib.contextmanager
def small_filesystem(path: Path, size_mib: int) -> Iterator[Path | None]:
    """A fresh tmpfs of ``size_mib`` at ``path`` (root only; else ``None``), unmounted
    afterwards: the log dir the disk scenario fills."""
    if os.geteuid() != 0:
        yield None
        return
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["umount", str(path)], check=False, capture_output=True)  # a killed run's
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)


def pg_env(ports: ChaosPorts, tmp: Path) -> dict[str, str]:
    return {
        "PG_PORT": str(ports.postgres),
        "PG_DATABASE": "fairlane",
        "FAIRLANE_STATE_DIR": str(tmp),
    }


def _services(stack: ChaosStack) -> list[Service]:
    tmp, ports = stack.tmp, stack.ports
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
        "FAIRLANE_INTERVAL_S": str(stack.interval_s),
        "FAIRLANE_HEARTBEAT_S": "10",
        **SIGNING_ENV,  # the agent signs, the scorer verifies
    }
    scorer_env = {
        **env,
        "FAIRLANE_APP_ID": f"scorer-{stack.prefix}",
        "FAIRLANE_REPLAY_TOLERANCE_S": str(REPLAY_TOLERANCE_S),
    }
    scorer_args = ["--web-port", str(ports.scorer), "--data-dir", str(tmp / "scorer-data")]
    scheduler_env = {
        **env,
        "DATABASE_URL": stack.database_url,
        "FAIRLANE_ADMIN_TOKEN": TOKEN,
        "FAIRLANE_STALE_AFTER_S": "30",
        "FAIRLANE_STABILIZATION_S": "20",
    }
    agent_args = ["--backend", "sim", "--node-prefix", stack.prefix, "--seed", "13"]
    agent_args += ["--nodes", str(stack.nodes), "--gpus-per-node", str(stack.gpus_per_node)]
    agent_args += ["--models", ",".join(MODELS), "--degraded-fraction", "0.05"]
    agent_args += ["--metrics-port", str(ports.agent), "--kafka-request-timeout-s", "5"]
    scorer = Service(
        "scorer",
        "fairlane_scorer",
        scorer_args,
        scorer_env,
        tmp / "scorer.log",
        f"{stack.scorer_url}/healthz",
    )
    schedulers = [
        Service(
            f"scheduler-{r}",
            "fairlane_scheduler",
            ["--port", str(ports.scheduler(r))],
            scheduler_env,
            tmp / f"scheduler-{r}.log",
            f"{stack.api(r)}/healthz",
        )
        for r in range(REPLICAS)
    ]
    agent = Service(
        "agent", "fairlane_agent", agent_args, env, tmp / "agent.log", f"{stack.agent_url}/healthz"
    )
    return [scorer, *schedulers, agent]


@contextlib.contextmanager
def chaos_stack(
    ports: ChaosPorts, tmp: Path, *, nodes: int, gpus_per_node: int, interval_s: float
) -> Iterator[ChaosStack]:
    """Servers first (fresh: purged before and after), then the services; ready once
    every replica answers /readyz."""
    import asyncio

    tmp.mkdir(parents=True, exist_ok=True)
    for old_log in tmp.glob("*.log"):  # a state dir reused from an earlier run
        old_log.unlink()
    with (
        small_filesystem(tmp / "kafka-small", SMALL_FS_MIB) as small,
        local_server("kafka.sh", kafka_env(ports, tmp, small)),
        local_server("postgres.sh", pg_env(ports, tmp)),
    ):
        bootstrap = f"127.0.0.1:{ports.kafka}"
        asyncio.run(ensure_topics(bootstrap))
        stack = ChaosStack(
            ports,
            tmp,
            bootstrap,
            f"postgresql://postgres@127.0.0.1:{ports.postgres}/fairlane",
            prefix="chaos",
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            interval_s=interval_s,
            small_log_dir=small,
        )
        try:
            for svc in _services(stack):  # all at once: their start-ups overlap
                svc.spawn()
                stack.services[svc.name] = svc
            for svc in stack.services.values():
                svc.wait_ready()
            if small is not None:  # the scorer has created its changelogs by now
                main_dir = tmp / f"kafka-{ports.kafka}" / "data"
                app_id = stack.services["scorer"].env["FAIRLANE_APP_ID"]
                asyncio.run(bound_changelogs(bootstrap, app_id))
                place_changelogs(bootstrap, stack.kafka_env, small, main_dir, app_id)
            deadline = time.monotonic() + 180
            while not stack.all_ready():
                if time.monotonic() > deadline:
                    raise TimeoutError("the scheduler replicas were not ready after 180 s")
                time.sleep(1)
            yield stack
        finally:
            for svc in reversed(list(stack.services.values())):
                svc.stop()
