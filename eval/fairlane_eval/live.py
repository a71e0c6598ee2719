"""``fairlane-eval live`` (``make eval-live``): the offline prediction checked on the real stack.

One run starts a scorer, a scheduler and a simulated fleet (``fairlane-agent --backend
sim`` on the run's scenario) as processes against a real Kafka and Postgres, waits for
the agent's first sample (scenario time 0), then replays the run's jobs in wall time:

- **Fairlane**: at each arrival, ``POST /v1/placements`` (``fastest``, queued when nothing
  qualifies), and ``DELETE`` when the job would have finished on the GPUs it got (it
  advances at their true speed, :func:`~fairlane_eval.core.live_prediction.job_end_s`);
- **static**: at the same instants, first fit with every GPU worth 1.0 over the
  scheduler's fleet listing (``GET /v1/nodes/{name}``), decided by the scheduler core's
  own ``choose`` (:class:`~fairlane_eval.core.static_schedule.StaticFirstFit`), in the
  engine's event order (:class:`~fairlane_eval.core.static_schedule.StaticSchedule`).
  The API has no score-blind policy, and a second scheduler would still rank by score;
  this is what the offline ``static`` policy does, so the two are compared like for like.

Then it counts the placements that started on a GPU the scenario was throttling and
compares both shares with the offline simulator's for the same fleet, scenario, jobs
and settings. Exit status 0 when both agree, 1 when one does not, 2 when the run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from fairlane_eval.core.live_prediction import (
    LiveSetup,
    Placed,
    hot_aisle_setup,
    job_end_s,
    short_setup,
)
from fairlane_eval.core.policies import policy
from fairlane_eval.core.static_schedule import (
    ListedGpu,
    StaticSchedule,
    capacity_resolution,
)
from fairlane_eval.core.workload import Job
from fairlane_eval.errors import LiveError
from fairlane_eval.live_report import FAIRLANE_POLICY, LiveResult, as_json, compare, format_report
from fairlane_eval.live_stack import (
    START_TIMEOUT_S,
    base_env,
    call,
    first_sample_ms,
    free_port,
    own_servers,
    prepare_workdir,
    process,
    samples_from_now,
    scorer_settings_env,
    until_up,
    write_key_ring,
)
from fairlane_events.gpu_models import find_model
from fairlane_runtime.kafka import ensure_topics

__all__ = ["LiveError", "LiveResult", "compare", "format_report", "live_main", "run_live"]

_ROOT = Path(__file__).resolve().parents[2]  # the repository, for .local/ (a clone only)
_SETUPS: dict[str, Callable[[int], LiveSetup]] = {
    "hot-aisle": hot_aisle_setup,
    "short": short_setup,
}
_POLL_S = 0.25
# Idle connections are dropped before uvicorn's 5 s keep-alive ends, so that a request is
# never sent on a connection the server is closing.
_LIMITS = httpx.Limits(keepalive_expiry=2.0)


class _Driver:
    """Replays the jobs against the API (Fairlane) and the static first fit, in wall time."""

    def __init__(self, setup: LiveSetup, client: httpx.AsyncClient, t0_ms: int, token: str) -> None:
        self.setup, self.client, self.t0_ms, self.token = setup, client, t0_ms, token
        self.fleet = setup.hidden_fleet()
        self.rows = {g.uuid: g.row for g in self.fleet.gpus}
        self.nodes = sorted({g.node for g in self.fleet.gpus})
        self.models = sorted({g.spec.key for g in self.fleet.gpus})
        self.fairlane: list[Placed] = []
        self.live_ids: set[str] = set()
        self.queued = 0
        self._static = StaticSchedule(self.fleet, setup.jobs, setup.interval_s, setup.horizon_s)

    @property
    def static_placed(self) -> list[Placed]:
        return self._static.placed

    def now_s(self) -> float:
        return time.time() - self.t0_ms / 1000

    async def _until(self, t_s: float) -> None:
        await asyncio.sleep(max(0.0, t_s - self.now_s()))

    async def _get(self, path: str) -> httpx.Response:
        return await call(self.client, "GET", path)

    async def listing(self) -> list[ListedGpu]:
        """Our GPUs as the scheduler lists them (catalogue keys for the models)."""
        answers = await asyncio.gather(*(self._get(f"/v1/nodes/{n}") for n in self.nodes))
        listed = []
        for node, answer in zip(self.nodes, answers, strict=True):
            if answer.status_code == 404:
                continue
            answer.raise_for_status()
            for gpu in answer.json()["gpus"]:
                spec = find_model(gpu["model"])
                model = spec.key if spec else gpu["model"]
                listed.append(ListedGpu(node, gpu["uuid"], gpu["index"], model))
        return listed

    async def run(self) -> None:
        tasks = [self._fairlane_job(j) for j in self.setup.jobs]
        tasks.append(self._static_run())
        end = self.setup.horizon_s
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), max(1.0, end - self.now_s()))
        except TimeoutError:
            pass  # the horizon: what runs still is released below, what waits is not counted
        finally:
            await self._release_all()

    async def _fairlane_job(self, job: Job) -> None:
        await self._until(job.arrival_s)
        body = {
            "job_id": f"{self.token}-{job.job_id}",
            "gpus_per_node": job.gpus_per_node,
            "nodes": job.nodes,
            "models": self.models,
            "policy": policy(FAIRLANE_POLICY).pack,
            "queue": True,
        }
        answer = await call(self.client, "POST", "/v1/placements", body)
        if answer.status_code not in (200, 201, 202):
            raise LiveError(f"placing {job.job_id}: {answer.status_code} {answer.text}")
        placement: dict[str, Any] = answer.json()
        self.live_ids.add(placement["id"])
        placed_ms = placement["created_at_ms"]
        if placement["state"] == "pending":
            self.queued += 1
            while placement["state"] == "pending":
                await asyncio.sleep(_POLL_S)
                placement = (await self._get(f"/v1/placements/{placement['id']}")).json()
            placed_ms = round(time.time() * 1000)
        uuids = [g["uuid"] for node in placement["nodes"] for g in node["gpus"]]
        foreign = [u for u in uuids if u not in self.rows]
        if foreign:
            raise LiveError(
                f"the scheduler placed {job.job_id} on GPUs of another fleet ({foreign[0]}): "
                "this Kafka carries scores of a fleet that is not the run's"
            )
        start_s = (placed_ms - self.t0_ms) / 1000
        rows = tuple(self.rows[u] for u in uuids)
        self.fairlane.append(Placed(job.job_id, start_s, rows))
        await self._until(
            job_end_s(self.fleet, rows, start_s, job.work_steps, self.setup.interval_s)
        )
        await call(self.client, "DELETE", f"/v1/placements/{placement['id']}")
        self.live_ids.discard(placement["id"])

    async def _static_run(self) -> None:
        """Static first fit at the scenario's instants, on the listing of that instant."""
        while (t_s := self._static.next_s()) is not None:
            await self._until(t_s)
            listing = await self.listing() if self._static.needs_listing() else []
            try:
                self._static.step(listing)
            except KeyError as exc:
                raise LiveError(f"the fleet listing has a GPU of another fleet: {exc}") from exc

    async def _release_all(self) -> None:
        """Free what the run still holds: a rerun on the same database (same seed, same
        uuids) must not find its GPUs allocated."""
        for placement_id in sorted(self.live_ids):
            with contextlib.suppress(httpx.HTTPError):
                await call(self.client, "DELETE", f"/v1/placements/{placement_id}")


async def _wait_ready(client: httpx.AsyncClient, driver: _Driver, by_s: float) -> None:
    """The scheduler is ready and lists every GPU of the run's fleet, before ``by_s``."""
    want = len(driver.fleet.gpus)
    while True:
        ready = (await call(client, "GET", "/readyz")).status_code == 200
        if ready and len(await driver.listing()) == want:
            return
        if driver.now_s() > by_s:
            raise LiveError(f"the scheduler did not list the fleet's {want} GPUs by t = {by_s} s")
        await asyncio.sleep(0.5)


async def run_live(
    setup: LiveSetup,
    *,
    kafka: str,
    database_url: str,
    workdir: Path,
    say: Callable[[str], None] = lambda _: None,
) -> LiveResult:
    """Run ``setup`` through a scorer, a scheduler and a simulated fleet started here
    against ``kafka`` and ``database_url``; their logs go to ``workdir``."""
    started = time.monotonic()
    token = f"live-{secrets.token_hex(3)}"
    setup = dataclasses.replace(setup, fleet=dataclasses.replace(setup.fleet, node_prefix=token))
    scenario = prepare_workdir(workdir, setup.scenario_toml)
    admin = secrets.token_urlsafe(24)
    api_port, scorer_port = free_port(), free_port()
    base = {**base_env(kafka), "FAIRLANE_SAMPLE_KEY_RING_FILE": str(write_key_ring(workdir))}
    scorer_env = {
        **base,
        **scorer_settings_env(setup.score, setup.heartbeat_s),
        "FAIRLANE_APP_ID": f"eval-{token}",
        "FAIRLANE_WEB_PORT": str(scorer_port),
        "FAIRLANE_DATA_DIR": str(workdir / "scorer-data"),
    }
    scheduler_env = {
        **base,
        "DATABASE_URL": database_url,
        "FAIRLANE_ADMIN_TOKEN": admin,
        "FAIRLANE_THRESHOLD": str(setup.score.threshold),
        "FAIRLANE_STABILIZATION_S": str(setup.stabilization_s),
        "FAIRLANE_STALE_AFTER_S": str(3 * setup.heartbeat_s),
        "FAIRLANE_CAPACITY_RESOLUTION": str(capacity_resolution(FAIRLANE_POLICY)),
    }
    spec = setup.fleet
    agent_env = {**base, "FAIRLANE_MODELS": json.dumps(list(spec.models))}
    agent_args = [
        "--backend", "sim", "--scenario", str(scenario), "--interval-s", str(setup.interval_s),
        "--nodes", str(spec.nodes), "--gpus-per-node", str(spec.gpus_per_node),
        "--degraded-fraction", str(spec.degraded_fraction), "--seed", str(spec.seed),
        "--node-prefix", spec.node_prefix, "--metrics-port", "0",
    ]  # fmt: skip
    await ensure_topics(kafka)
    headers = {"Authorization": f"Bearer {admin}"}
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{api_port}", headers=headers, timeout=30, limits=_LIMITS
            )
        )
        scorer_log, scheduler_log = workdir / "scorer.log", workdir / "scheduler.log"
        scorer = await stack.enter_async_context(
            process("fairlane_scorer", [], scorer_env, scorer_log)
        )
        scheduler = await stack.enter_async_context(
            process("fairlane_scheduler", ["--port", str(api_port)], scheduler_env, scheduler_log)
        )
        await until_up(client, f"http://127.0.0.1:{scorer_port}/healthz", scorer, scorer_log)
        await until_up(client, "/healthz", scheduler, scheduler_log)
        say(f"scorer and scheduler up; starting the simulated fleet {token}-*")
        consumer = await samples_from_now(kafka)
        stack.push_async_callback(consumer.stop)
        await stack.enter_async_context(
            process("fairlane_agent", agent_args, agent_env, workdir / "agent.log")
        )
        t0_ms = await first_sample_ms(consumer, token, START_TIMEOUT_S)
        driver = _Driver(setup, client, t0_ms, token)
        await _wait_ready(client, driver, by_s=min(j.arrival_s for j in setup.jobs))
        say(f"fleet listed at t = {driver.now_s():.1f} s; {len(setup.jobs)} jobs until "
            f"t = {setup.horizon_s:.0f} s")  # fmt: skip
        await driver.run()
    return LiveResult(
        setup,
        t0_ms,
        tuple(sorted(driver.fairlane, key=lambda p: p.job_id)),
        tuple(sorted(driver.static_placed, key=lambda p: p.job_id)),
        driver.queued,
        time.monotonic() - started,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairlane-eval live",
        description="Place a scenario's jobs through the live stack with Fairlane and with "
        "static first fit, and compare the share that landed on throttled GPUs with the "
        "offline simulator's prediction.",
    )
    parser.add_argument("--setup", choices=sorted(_SETUPS), default="hot-aisle")
    parser.add_argument("--seed", type=int, default=0, help="fleet and job seed")
    parser.add_argument("--noise-seeds", type=int, default=5, help="offline runs to average")
    parser.add_argument("--kafka", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--kafka-port", type=int, default=29792, help="when started here")
    parser.add_argument("--pg-port", type=int, default=25436, help="when started here")
    parser.add_argument("--workdir", type=Path, default=_ROOT / ".local" / "eval-live")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    return parser


def _say(line: str) -> None:
    print(f"eval-live: {line}", file=sys.stderr, flush=True)


def live_main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup = _SETUPS[args.setup](args.seed)
    try:
        with contextlib.ExitStack() as stack:
            kafka, database_url = args.kafka, args.database_url
            if kafka is None or database_url is None:
                _say(f"starting Kafka (:{args.kafka_port}) and Postgres (:{args.pg_port})")
                own_kafka, own_pg = stack.enter_context(own_servers(args.kafka_port, args.pg_port))
                kafka, database_url = kafka or own_kafka, database_url or own_pg
            result = asyncio.run(
                run_live(
                    setup, kafka=kafka, database_url=database_url, workdir=args.workdir, say=_say
                )
            )
    except (LiveError, httpx.HTTPError) as exc:
        _say(f"error: {exc!r}" if isinstance(exc, httpx.HTTPError) else f"error: {exc}")
        return 2
    agreements = compare(result, range(args.noise_seeds))
    print(format_report(result, agreements))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(result, agreements), indent=2) + "\n")
    return 0 if all(a.agrees for a in agreements) else 1


if __name__ == "__main__":
    raise SystemExit(live_main())
