"""The fleet dashboard in a real browser: Debian's headless Chromium, driven by
Playwright, against the agent (a short hot-aisle scenario), the scorer and the scheduler
running as processes on real Kafka and Postgres.

The page logs in with the admin token, shows the simulated fleet, sees a GPU of the hot
node go from free to held out (below the threshold, then cooling) without a reload, and
shows a placement made through the API. It leaves a screenshot in docs/dashboard.png.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, async_playwright

from tests.processes import free_port, service, wait_for_http

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "dashboard-test-token"
MODEL = "A100-40GB"  # no other test's fleet has it, so placements land on this fleet
HELD_OUT = ("below threshold", "cooling")

# Node 0 heats up 10 s after the agent starts and throttles hard; node 1 stays calm.
SCENARIO = f"""
name = "dashboard hot aisle"

[fleet]
nodes = 2
gpus_per_node = 4
models = ["{MODEL}"]
degraded_fraction = 0.0

[[events]]
kind = "thermal"
nodes = [0]
start_s = 10
duration_s = 600
ramp_s = 3
clock_factor = 0.3
"""


@dataclass(frozen=True)
class Stack:
    url: str
    hot_node: str
    calm_node: str


def chromium() -> str:
    """Debian's chromium, installed by the project's script when missing (never
    Playwright's own browser download)."""
    found = subprocess.run(
        [str(ROOT / "scripts/debian-tool.sh"), "chromium"],
        check=True,
        capture_output=True,
        text=True,
    )
    return found.stdout.strip()


@pytest.fixture
def stack(kafka_bootstrap: str, database_url: str, tmp_path: Path, unique: str) -> Iterator[Stack]:
    prefix = f"dash-{unique}"
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO)
    scorer_port, api_port = free_port(), free_port()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FAIRLANE_INTERVAL_S": "1",
        "FAIRLANE_HEARTBEAT_S": "5",
    }
    scorer_env = {
        **env,
        "FAIRLANE_APP_ID": f"scorer-{prefix}",
        "FAIRLANE_WEB_PORT": str(scorer_port),
        "FAIRLANE_DATA_DIR": str(tmp_path / "scorer-data"),
    }
    scheduler_env = {
        **env,
        "DATABASE_URL": database_url,
        "FAIRLANE_ADMIN_TOKEN": TOKEN,
        "FAIRLANE_STALE_AFTER_S": "30",
        "FAIRLANE_STABILIZATION_S": "60",
    }
    agent_args = ["--node-prefix", prefix, "--scenario", str(scenario), "--seed", "3"]
    agent_args += ["--metrics-port", "0", "--backend", "sim"]
    with (
        service("fairlane_scorer", [], scorer_env, tmp_path / "scorer.log") as scorer,
        service(
            "fairlane_scheduler", ["--port", str(api_port)], scheduler_env, tmp_path / "sched.log"
        ) as scheduler,
    ):
        wait_for_http(f"http://127.0.0.1:{scorer_port}/healthz", scorer, tmp_path / "scorer.log")
        url = f"http://127.0.0.1:{api_port}"
        wait_for_http(f"{url}/healthz", scheduler, tmp_path / "sched.log")
        with service("fairlane_agent", agent_args, env, tmp_path / "agent.log"):
            yield Stack(url, f"{prefix}-0000", f"{prefix}-0001")


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield await browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            await browser.close()


def cell_states(node: str) -> str:
    return (
        f"[...document.querySelectorAll('[data-node=\"{node}\"] .cell')].map(c => c.dataset.state)"
    )


async def test_the_dashboard_shows_the_fleet_live(stack: Stack, page: Page) -> None:
    await page.goto(f"{stack.url}/dashboard")
    await page.fill("#token", TOKEN)
    await page.click("#login button")
    await page.wait_for_selector(f'[data-node="{stack.calm_node}"] .cell', timeout=60_000)
    await page.wait_for_function(f"{cell_states(stack.hot_node)}.length === 4", timeout=30_000)
    await page.evaluate("window.__notReloaded = true")

    # The hot node's GPUs start healthy, then fall out as they throttle: live.
    await page.wait_for_function(
        f"{cell_states(stack.hot_node)}.some(s => s === 'free')", timeout=30_000
    )
    held_out = " || ".join(f"s === '{s}'" for s in HELD_OUT)
    await page.wait_for_function(
        f"{cell_states(stack.hot_node)}.every(s => {held_out})", timeout=90_000
    )
    assert await page.evaluate(f"{cell_states(stack.calm_node)}") == ["free"] * 4

    # A placement made through the API shows up, and its GPUs turn allocated.
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as api:
        answer = await api.post(
            "/v1/placements",
            json={"job_id": "dash-job", "gpus_per_node": 2, "models": [MODEL]},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert answer.status_code == 201, answer.text
    placement = answer.json()
    (node,) = placement["nodes"]
    assert node["node"] == stack.calm_node
    await page.wait_for_selector(f'#placements tr[data-placement-id="{placement["id"]}"]')
    for gpu in node["gpus"]:
        await page.wait_for_selector(f'.cell[data-uuid="{gpu["uuid"]}"][data-state="allocated"]')
    assert time.monotonic() - started < 10
    assert await page.evaluate("window.__notReloaded") is True

    # The breakdown and history of a throttled GPU, for the screenshot in the docs.
    await page.click(f'[data-node="{stack.hot_node}"] .cell >> nth=0')
    await page.wait_for_selector("#chart canvas")
    assert "clock" in (await page.inner_text("#detail-components"))
    if os.environ.get("FAIRLANE_DASHBOARD_SCREENSHOT", "1") == "1":
        await page.screenshot(path=str(ROOT / "docs/dashboard.png"), full_page=True)
