"""``fairlane run`` against a real scheduler process, Postgres and Kafka, running the
numpy demo job (``python -m fairlane.demo``) whose ranks sleep by their GPU's hidden speed.

The placement is never leaked: released when the job ends, on SIGTERM to the launcher,
on SIGKILL of the job, and left to its lease (which then expires) when the scheduler is
gone. Progress lands on the topic with the placement's own GPUs; a degraded event
reaches the job as SIGUSR1 and a file, an idle one is a warning line."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairlane.client import AsyncClient, Client
from fairlane.errors import ApiError, UnreachableError
from fairlane.job_run import FOLLOW_S
from fairlane.models import PlacementRequest
from fairlane_events.records import JobProgress, PlacementEvent, SlowGpu
from tests.factories import GIB, gpu_score
from tests.launcher_harness import (
    Launcher,
    Scheduler,
    launcher,
    publish_event,
    published_progress,
    scheduler_process,
    wait_until,
)
from tests.processes import free_port
from tests.scheduler_harness import gone_stale, node_scores, publish
from tests.servers import create_database, drop_database

pytestmark = pytest.mark.integration

GPUS = 4
#: The module's GPUs claim more memory than any other test's, and every request here asks
#: for that much: on the broker the whole session shares, no job lands on another
#: test's nodes (there are B200s elsewhere), whatever the other tests left fresh.
MEMORY_GIB = 4000.0
BASE_S = 0.04
SPEEDS = (1.0, 0.5, 1.0, 0.5)  # GPU i's hidden speed, on every node


def hidden_speed(uuid: str) -> float:
    """The hidden speed of ``GPU-<node>-<i>``."""
    return SPEEDS[int(uuid.rsplit("-", 1)[1])]


@pytest.fixture(scope="module")
def nodes(kafka_bootstrap: str) -> Iterator[list[str]]:
    """Two nodes of the module's own, GPUS B200s each, all healthy; stale afterwards, so
    that the later tests' schedulers (which keep scores fresh for long) never place on
    these fast GPUs."""
    names = [f"launch-{os.urandom(4).hex()}" for _ in range(2)]
    now = int(time.time() * 1000)
    gpus = [("NVIDIA B200", 0.95, MEMORY_GIB)] * GPUS
    scores = [s for name in names for s in node_scores(name, gpus, speed=6.0, ts_ms=now)]
    asyncio.run(publish(kafka_bootstrap, scores))
    yield names
    asyncio.run(publish(kafka_bootstrap, gone_stale(scores)))


@pytest.fixture(scope="module")
def module_database(postgres_dsn: str) -> Iterator[str]:
    url = asyncio.run(create_database(postgres_dsn))
    yield url
    asyncio.run(drop_database(postgres_dsn, url))


@pytest.fixture(scope="module")
def scheduler(
    kafka_bootstrap: str,
    module_database: str,
    nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scheduler]:
    log = tmp_path_factory.mktemp("scheduler") / "scheduler.log"
    with scheduler_process(kafka_bootstrap, module_database, log) as running:
        yield running


@pytest.fixture
def env(
    kafka_bootstrap: str, scheduler: Scheduler, nodes: list[str], tmp_path: Path
) -> dict[str, str]:
    speeds = tmp_path / "speeds.json"
    uuids = [f"GPU-{name}-{i}" for name in nodes for i in range(GPUS)]
    speeds.write_text(json.dumps({uuid: hidden_speed(uuid) for uuid in uuids}))
    return {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FAIRLANE_SCHEDULER_URL": scheduler.url,
        "FAIRLANE_DEMO_SPEEDS": str(speeds),
        "FAIRLANE_RELEASE_TIMEOUT_S": "2",
        "FAIRLANE_KAFKA_RETRY_S": "1",
    }


def run_args(*extra: str, gpus: int = 2) -> list[str]:
    return [
        "--gpus",
        str(gpus),
        "--min-gpu-memory-gib",
        str(MEMORY_GIB),
        "--lease-s",
        "3",
        *extra,
    ]


def demo(*args: str) -> list[str]:
    """The demo job, announcing its pid first (the test may kill it)."""
    line = " ".join(["exec", sys.executable, "-m", "fairlane.demo", *args])
    return ["sh", "-c", f'echo "child pid $$"; {line}']


def child_pid(run: Launcher) -> int:
    line = next(ln for ln in run.wait_for("child pid ").splitlines() if "child pid " in ln)
    return int(line.split()[-1])


def assert_released(scheduler: Scheduler, placement_id: str) -> None:
    assert scheduler.placement(placement_id)["state"] == "released"


def test_the_job_gets_its_env_and_its_progress_is_published(
    env: dict[str, str], scheduler: Scheduler, kafka_bootstrap: str, tmp_path: Path
) -> None:
    placement_id = run_demo_job(env, tmp_path)
    check_env(scheduler, placement_id, tmp_path / "child.env")
    records = asyncio.run(published_progress(kafka_bootstrap, placement_id))
    check_progress(scheduler, placement_id, records, steps=40, job_class="demo-llm")


def run_demo_job(env: dict[str, str], tmp_path: Path) -> str:
    """A two-GPU demo job of 40 steps: its placement id, once the launcher exited 0."""
    seen = tmp_path / "child.env"
    command = [
        "sh",
        "-c",
        f"env > {seen}; exec {sys.executable} -m fairlane.demo --steps 40 --base-s {BASE_S}",
    ]
    with launcher(
        [*run_args("--class", "demo-llm", "--window-s", "1"), "--", *command],
        env,
        tmp_path / "launcher.log",
    ) as run:
        placement_id = run.placement_id()
        assert run.exit_code() == 0, run.text()
    return placement_id


def check_env(scheduler: Scheduler, placement_id: str, seen: Path) -> None:
    child = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    placement = scheduler.placement(placement_id)
    assert placement["state"] == "released"
    (node,) = placement["nodes"]
    assert {k: child[k] for k in ("CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT")} == {
        "CUDA_VISIBLE_DEVICES": node["cuda_visible_devices"],
        "MASTER_ADDR": node["master_addr"],
        "MASTER_PORT": str(node["master_port"]),
    }
    assert (child["NODE_RANK"], child["NNODES"], child["WORLD_SIZE"]) == ("0", "1", "2")
    assert (child["FAIRLANE_PLACEMENT_ID"], child["FAIRLANE_JOB_CLASS"]) == (
        placement_id,
        "demo-llm",
    )
    assert child["FAIRLANE_GPU_UUIDS"] == ",".join(g["uuid"] for g in node["gpus"])


def placed_nodes(scheduler: Scheduler, placement_id: str) -> list[dict[str, Any]]:
    """The placement's nodes in node-rank order."""
    nodes: list[dict[str, Any]] = scheduler.placement(placement_id)["nodes"]
    return sorted(nodes, key=lambda n: int(n["node_rank"]))


def check_progress(
    scheduler: Scheduler,
    placement_id: str,
    records: list[JobProgress],
    *,
    steps: int,
    job_class: str,
) -> None:
    """Every step of every rank, each on its own GPU at that GPU's hidden speed."""
    uuids = [g["uuid"] for n in placed_nodes(scheduler, placement_id) for g in n["gpus"]]
    for each in range(len(uuids)):
        assert sum(r.steps for rec in records for r in rec.ranks if r.rank == each) == steps
    for record in records:
        assert record.job_class == job_class
        for rank in record.ranks:
            assert rank.uuid == uuids[rank.rank]  # rank i on the placement's GPU i
            # the rank's compute time is its GPU's: base / hidden speed (sleep overshoots)
            assert BASE_S <= rank.compute_s_per_step * hidden_speed(rank.uuid) < BASE_S * 1.6


def test_a_gang_runs_one_child_per_node(
    env: dict[str, str], scheduler: Scheduler, kafka_bootstrap: str, tmp_path: Path
) -> None:
    show = (
        'echo "node $NODE_RANK/$NNODES $FAIRLANE_NODE rank $RANK of $WORLD_SIZE '
        'at $MASTER_ADDR:$MASTER_PORT"'
    )
    job = f"{show}; exec {sys.executable} -m fairlane.demo --steps 10 --base-s {BASE_S}"
    args = run_args("--nodes", "2", "--class", "gang", "--window-s", "1", gpus=1)
    with launcher(
        [*args, "--master-addr", "127.0.0.1", "--", "sh", "-c", job], env, tmp_path / "l.log"
    ) as run:
        placement_id = run.placement_id()
        assert run.exit_code() == 0, run.text()
    assert_released(scheduler, placement_id)
    nodes = placed_nodes(scheduler, placement_id)
    assert len({n["node"] for n in nodes}) == 2
    port = nodes[0]["master_port"]
    for n in nodes:
        line = f"node {n['node_rank']}/2 {n['node']} rank {n['node_rank']} of 2 at 127.0.0.1:{port}"
        assert line in run.text()
    records = asyncio.run(published_progress(kafka_bootstrap, placement_id))
    check_progress(scheduler, placement_id, records, steps=10, job_class="gang")


def test_a_multi_host_gang_runs_its_other_node_where_fairlane_join_is_run(
    env: dict[str, str], scheduler: Scheduler, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``--multi-host``: the launcher starts node 0 only and prints the ``fairlane join``
    line of node 1; run as printed (here on this host too), it runs node 1's child, whose
    ranks' progress is published beside node 0's, and neither renews nor releases."""
    # A rendezvous, as torchrun's: each node starts stepping once both have started.
    meet = f"touch {tmp_path}/up-$NODE_RANK; until [ -e {tmp_path}/up-0 ] && "
    meet += f"[ -e {tmp_path}/up-1 ]; do sleep 0.1; done"
    job = f"{meet}; exec {sys.executable} -m fairlane.demo --steps 10 --base-s {BASE_S}"
    args = run_args("--nodes", "2", "--class", "hosts", "--window-s", "1", gpus=1)
    args += ["--master-addr", "127.0.0.1", "--multi-host", "--", "sh", "-c", job]
    with launcher(args, env, tmp_path / "run.log") as run:
        placement_id = run.placement_id()
        other = placed_nodes(scheduler, placement_id)[1]["node"]
        line = join_line_of(run, other)
        assert line[:5] == ["fairlane", "join", placement_id, "--node", other]
        with launcher(line[2:], env, tmp_path / "join.log", verb="join") as joined:
            assert joined.exit_code() == 0, joined.text()
        assert run.exit_code() == 0, run.text()
    assert f"joined {placement_id} on {other} (node rank 1)" in joined.text()
    assert f"released {placement_id}" not in joined.text()  # the lease is the first launcher's
    assert_released(scheduler, placement_id)
    records = asyncio.run(published_progress(kafka_bootstrap, placement_id))
    check_progress(scheduler, placement_id, records, steps=10, job_class="hosts")
    assert {len(r.ranks) for r in records} == {1}  # each host reports its own node


def test_a_joined_node_ends_when_the_placement_does(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    joined_file = tmp_path / "joined"
    args = run_args("--nodes", "2", "--grace-s", "1", gpus=1)
    # Node 0's job ends once node 1's has started; node 1's would never end by itself.
    args += ["--multi-host", "--", "sh", "-c", f"until [ -e {joined_file} ]; do sleep 0.1; done"]
    with launcher(args, env, tmp_path / "run.log") as run:
        placement_id = run.placement_id()
        other = placed_nodes(scheduler, placement_id)[1]["node"]
        nowhere = [placement_id, "--node", "nowhere", "--", "true"]
        with launcher(nowhere, env, tmp_path / "nowhere.log", verb="join") as wrong:
            assert wrong.exit_code() == 2
        assert "has no node nowhere (its nodes: " in wrong.text()
        line = join_line_of(run, other)
        forever = [*line[2 : line.index("--")], "--", "sh", "-c", f"touch {joined_file}; sleep 600"]
        with launcher(forever, env, tmp_path / "join.log", verb="join") as joined:
            assert run.exit_code() == 0, run.text()
            # released: the grace (1 s) to end by itself, then SIGTERM
            assert joined.exit_code(timeout_s=FOLLOW_S + 30) == 128 + signal.SIGTERM
    assert f"{placement_id} was released: its job ends" in joined.text()
    assert_released(scheduler, placement_id)


def join_line_of(run: Launcher, node: str) -> list[str]:
    """The ``fairlane join`` command the launcher printed for ``node``, as words."""
    text = run.wait_for(f"on {node}: fairlane join ")
    line = next(ln for ln in text.splitlines() if f"on {node}: fairlane join " in ln)
    return shlex.split(line.split(f"on {node}: ", 1)[1])


def test_a_share_of_a_gpu_runs_with_the_limits_of_its_answer(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    """``--gpu-share``: the child's environment holds what the answer's node says keeps
    the job inside its share (issue 29)."""
    show = 'echo "share $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $FAIRLANE_GPU_MEMORY_FRACTION"'
    args = run_args("--gpu-share", "0.25", gpus=1)
    with launcher([*args, "--", "sh", "-c", show], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        assert run.exit_code() == 0, run.text()
    assert_released(scheduler, placement_id)
    (node,) = placed_nodes(scheduler, placement_id)
    assert node["gpus"][0]["share"] == 0.25
    env_line = f"share 25 {node['env']['FAIRLANE_GPU_MEMORY_FRACTION']}"
    assert env_line in run.text()
    assert node["env"]["FAIRLANE_GPU_MEMORY_FRACTION"] == "0.250"


def test_sigterm_to_the_launcher_stops_the_job_and_releases(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    with launcher([*run_args(), "--", *demo("--steps", "0")], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("fairlane.demo: running")
        run.proc.send_signal(signal.SIGTERM)
        assert run.exit_code() == 0, run.text()  # the demo stops cleanly on SIGTERM
    assert "fairlane.demo: stopped=True" in run.text()
    assert_released(scheduler, placement_id)


_DEAF = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('deaf', flush=True); time.sleep(60)"
)


def test_a_second_signal_kills_a_job_that_ignores_the_first(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    args = [*run_args("--grace-s", "60"), "--", sys.executable, "-c", _DEAF]
    with launcher(args, env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("deaf")
        run.proc.send_signal(signal.SIGTERM)
        run.wait_for("SIGTERM: stopping the job")
        run.proc.send_signal(signal.SIGINT)
        assert run.exit_code(timeout_s=20) == 128 + signal.SIGKILL, run.text()
    assert "SIGINT again: killing the job" in run.text()
    assert_released(scheduler, placement_id)


def test_a_command_that_cannot_run_is_one_line_and_127(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    with launcher([*run_args(), "--", "/nonexistent/job"], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        assert run.exit_code() == 127, run.text()
    text = run.text()
    assert "fairlane: error: cannot run /nonexistent/job: No such file or directory\n" in text
    assert "Traceback" not in text
    assert_released(scheduler, placement_id)


def test_sigkill_of_the_job_releases_and_exits_137(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    with launcher([*run_args(), "--", *demo("--steps", "0")], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("fairlane.demo: running")
        os.kill(child_pid(run), signal.SIGKILL)
        assert run.exit_code() == 128 + signal.SIGKILL, run.text()
    assert_released(scheduler, placement_id)


def test_sigkill_of_the_launcher_stops_the_job_and_the_lease_expires(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    """Nothing can be forwarded or released: the job gets SIGTERM from Linux (the
    launcher's death signal) and the placement expires with its lease."""
    with launcher([*run_args(), "--", *demo("--steps", "0")], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("fairlane.demo: running")
        pid = child_pid(run)
        run.proc.kill()
        run.wait_for("fairlane.demo: stopped=True", after_exit=True)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), "the job's end")
    wait_until(lambda: scheduler.placement(placement_id)["state"] == "expired", "lease expiry")


def test_a_lost_lease_stops_the_job_and_exits_1(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    """Released behind the launcher's back: the next renewal is refused for good (409
    not_live), so the job is stopped, though it exits 0 itself."""
    with launcher([*run_args(), "--", *demo("--steps", "0")], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("fairlane.demo: running")
        with Client(scheduler.url) as api:
            api.release(placement_id)
        assert run.exit_code() == 1, run.text()
    text = run.text()
    assert f"fairlane: error: the lease of {placement_id} is lost (409 not_live" in text
    assert "fairlane.demo: stopped=True" in text


def test_an_idle_event_is_told_and_a_degraded_one_reaches_the_job_as_sigusr1_and_a_file(
    env: dict[str, str], scheduler: Scheduler, kafka_bootstrap: str, tmp_path: Path
) -> None:
    args = [*run_args(gpus=1), "--", *demo("--steps", "0", "--exit-on-degraded")]
    with launcher(args, env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("fairlane.demo: running")
        placement = scheduler.placement(placement_id)
        (node,) = placement["nodes"]
        uuid = node["gpus"][0]["uuid"]
        now_ms = int(time.time() * 1000)
        about = {
            "schema_": "placement/1",
            "placement_id": placement_id,
            "job_id": str(placement["job_id"]),
            "namespace": str(placement["namespace"]),
            "ts_ms": now_ms,
            "nodes": [],
        }
        idle = PlacementEvent(
            **about, event="idle", idle_since_ms=now_ms - 600_000, lease_expires_ms=now_ms
        )
        asyncio.run(publish_event(kafka_bootstrap, idle))
        run.wait_for(f"placement {placement_id} idle since")
        slow = [SlowGpu(uuid=uuid, node=node["node"], speed=0.5, source="learned")]
        degraded = PlacementEvent(**about, event="degraded", slow_gpus=slow)
        asyncio.run(publish_event(kafka_bootstrap, degraded))
        assert run.exit_code() == 0, run.text()
    text = run.text()
    lease_end = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC).isoformat(timespec="seconds")
    assert f"its namespace's idle policy ends the lease at {lease_end}" in text
    assert f"fairlane.demo: degraded: {uuid}=0.50" in text
    assert f"fairlane: warning: placement {placement_id} degraded: {uuid} on" in text
    assert_released(scheduler, placement_id)


def test_kafka_away_never_fails_the_job(
    env: dict[str, str], scheduler: Scheduler, tmp_path: Path
) -> None:
    env = {**env, "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
    args = [*run_args("--window-s", "0.5"), "--", *demo("--steps", "20", "--base-s", "0.02")]
    with launcher(args, env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        assert run.exit_code() == 0, run.text()
    text = run.text()
    assert text.count("Kafka is not reachable at") == 1, text
    assert text.count("cannot read degraded events") == 1, text
    assert "Traceback" not in text
    assert_released(scheduler, placement_id)


def test_the_scheduler_gone_leaves_the_placement_to_its_lease(
    env: dict[str, str],
    scheduler: Scheduler,
    kafka_bootstrap: str,
    module_database: str,
    tmp_path: Path,
) -> None:
    with scheduler_process(kafka_bootstrap, module_database, tmp_path / "s2.log") as doomed:
        env = {**env, "FAIRLANE_SCHEDULER_URL": doomed.url}
        with launcher([*run_args(), "--", *demo("--steps", "0")], env, tmp_path / "l.log") as run:
            placement_id = run.placement_id()
            run.wait_for("fairlane.demo: running")
            doomed.proc.kill()
            run.wait_for(f"fairlane: warning: cannot renew {placement_id}")
            run.proc.send_signal(signal.SIGTERM)
            assert run.exit_code() == 0, run.text()
    text = run.text()
    assert "Traceback" not in text
    assert f"fairlane: error: could not release {placement_id} (" in text
    assert "its lease expires at 20" in text
    wait_until(lambda: scheduler.placement(placement_id)["state"] == "expired", "lease expiry")


def test_the_blocking_client_places_renews_and_releases(scheduler: Scheduler) -> None:
    request = PlacementRequest(
        job_id=f"client-{os.urandom(4).hex()}",
        gpus_per_node=1,
        models=["B200"],
        min_gpu_memory_gib=MEMORY_GIB,
        lease_s=30,
    )
    with Client(scheduler.url) as api:
        placement = api.place(request)
        assert placement.state == "placed"
        assert api.place(request) == placement  # the same request: the same placement
        renewed = api.renew(placement.id, lease_s=60)
        assert renewed.lease_expires_at_ms is not None
        assert placement.lease_expires_at_ms is not None
        assert renewed.lease_expires_at_ms > placement.lease_expires_at_ms
        with pytest.raises(ApiError) as conflict:
            api.place(request.model_copy(update={"gpus_per_node": 2}))
        assert (conflict.value.status, conflict.value.code) == (409, "job_conflict")
        assert not conflict.value.retryable
        assert api.release(placement.id).state == "released"
        assert api.release(placement.id).state == "released"  # idempotent
        with pytest.raises(ApiError) as gone:
            api.get(str(uuid.uuid4()))
        assert gone.value.status == 404


async def test_the_async_client_speaks_the_same_api(scheduler: Scheduler) -> None:
    request = PlacementRequest(
        job_id=f"client-{os.urandom(4).hex()}", gpus_per_node=1, min_gpu_memory_gib=MEMORY_GIB
    )
    async with AsyncClient(scheduler.url) as api:
        placement = await api.place(request)
        assert (await api.get(placement.id)).state == "placed"
        assert placement.lease_expires_at_ms is None  # no lease asked: none given
        assert (await api.release(placement.id)).state == "released"
        with pytest.raises(ApiError) as not_live:
            await api.renew(placement.id)
        assert (not_live.value.status, not_live.value.code) == (409, "not_live")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}") as nobody:
        with pytest.raises(UnreachableError):
            await nobody.get(placement.id)


def test_a_gpu_the_scheduler_scores_slow_reaches_the_job(
    env: dict[str, str], scheduler: Scheduler, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The whole loop, nothing hand-made: the job's GPU scores below the threshold, the
    scheduler announces it (a ``degraded`` event through its outbox), the launcher writes
    the file and signals the job, which stops as if it had checkpointed. (The GPU is then
    cooling for the module's remaining tests, which need fewer.)"""
    args = [*run_args("--class", "degrade-me", gpus=1), "--"]
    job = demo("--steps", "0", "--exit-on-degraded")
    with launcher([*args, *job], env, tmp_path / "l.log") as run:
        placement_id = run.placement_id()
        run.wait_for("fairlane.demo: running")
        (node,) = scheduler.placement(placement_id)["nodes"]
        gpu = node["gpus"][0]
        slow = gpu_score(
            node=node["node"],
            uuid=gpu["uuid"],
            index=gpu["index"],
            model="NVIDIA B200",
            score=0.3,
            speed=6.0,
            mem_total_bytes=int(MEMORY_GIB * GIB),
            ts_ms=int(time.time() * 1000),
        )
        asyncio.run(publish(kafka_bootstrap, [slow]))
        assert run.exit_code() == 0, run.text()
    text = run.text()
    assert f"degraded: {gpu['uuid']} on {node['node']} at 0.30 (score)" in text
    assert f"fairlane.demo: degraded: {gpu['uuid']}=0.30" in text
    assert_released(scheduler, placement_id)
