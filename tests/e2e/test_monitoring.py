"""deploy/monitoring/ on a real Prometheus (Debian's package, installed by
scripts/debian-tool.sh when missing) scraping a live stack: the shipped scrape config
(its targets pointed at the stack's ports, scraping every second), the shipped rules,
and every query of the shipped Grafana dashboard. Each rule's query, each alert's
left-hand side, and each panel's query must return data."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.live_stack import LiveStack, debian_tool, live_stack
from tests.processes import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy/monitoring"
MODEL = "A100-40GB"
SCENARIO = f"""
name = "monitoring"

[fleet]
nodes = 2
gpus_per_node = 2
models = ["{MODEL}"]
degraded_fraction = 0.0
"""
_COMPARISON = re.compile(r"^(?P<lhs>.+?)\s*(?:[<>]=?|[!=]=)\s*[\d.]+$", re.DOTALL)


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load((MONITORING / "rules.yml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def queries() -> dict[str, str]:
    """name -> PromQL that must return data: recording rules, alerts' left-hand sides
    (the comparison with the limit only filters), and every panel target."""
    found: dict[str, str] = {}
    for rule in rules():
        if "record" in rule:
            found[f"rule {rule['record']}"] = rule["expr"]
        else:
            match = _COMPARISON.match(rule["expr"].strip())
            assert match, f"alert {rule['alert']}: not `<query> <op> <limit>`: {rule['expr']}"
            found[f"alert {rule['alert']}"] = match["lhs"]
    dashboard = json.loads((MONITORING / "grafana/fairlane.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    return found


def config_for(stack: LiveStack, tmp: Path) -> Path:
    """The shipped config with its targets pointed at the stack, every second."""
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    targets = {
        "fairlane-scheduler": stack.url,
        "fairlane-scorer": stack.scorer_url,
        "fairlane-agent": stack.agent_metrics_url,
    }
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [urlsplit(targets[job["job_name"]]).netloc]}]
    shutil.copy(MONITORING / "rules.yml", tmp / "rules.yml")
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    subprocess.run([debian_tool("promtool"), "check", "config", str(path)], check=True)
    return path


@contextlib.contextmanager
def prometheus(config: Path, tmp: Path) -> Iterator[str]:
    port = free_port()
    with (tmp / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                debian_tool("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture
def stack(
    kafka_bootstrap: str, database_url: str, tmp_path: Path, unique: str
) -> Iterator[LiveStack]:
    with live_stack(kafka_bootstrap, database_url, tmp_path, f"mon-{unique}", SCENARIO) as s:
        yield s


def place_a_job(stack: LiveStack) -> None:
    """So the placement latency histogram has observations."""
    deadline = time.monotonic() + 60
    while httpx.get(f"{stack.url}/readyz").status_code != 200:
        assert time.monotonic() < deadline, httpx.get(f"{stack.url}/readyz").text
        time.sleep(0.5)
    answer = httpx.post(
        f"{stack.url}/v1/placements",
        json={"job_id": "mon-job", "gpus_per_node": 1, "models": [MODEL]},
        headers={"Authorization": f"Bearer {stack.token}"},
    )
    assert answer.status_code == 201, answer.text


def query(prom: str, promql: str) -> list[Any]:
    answer = httpx.get(f"{prom}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", (promql, answer)
    result: list[Any] = answer["data"]["result"]
    return result


def test_every_rule_and_panel_returns_data_on_a_real_prometheus(
    stack: LiveStack, tmp_path: Path
) -> None:
    subprocess.run(
        [debian_tool("promtool"), "check", "rules", str(MONITORING / "rules.yml")], check=True
    )
    place_a_job(stack)
    wanted = queries()
    with prometheus(config_for(stack, tmp_path), tmp_path) as prom:
        empty = dict(wanted)
        deadline = time.monotonic() + 90
        while empty and time.monotonic() < deadline:
            time.sleep(2)
            with contextlib.suppress(httpx.TransportError):
                empty = {name: q for name, q in empty.items() if not query(prom, q)}
        for rule in rules():  # the whole alert expression is valid PromQL too
            query(prom, rule.get("expr", ""))
        up = {r["metric"]["job"]: r["value"][1] for r in query(prom, "up")}
    assert up == {"fairlane-scheduler": "1", "fairlane-scorer": "1", "fairlane-agent": "1"}
    assert not empty, f"no data for: {json.dumps(empty, indent=2)}"


def test_the_idle_holdings_alert_fires_only_after_its_window(tmp_path: Path) -> None:
    """The shipped rules under promtool's rule tests: two replicas both report the one
    idle placement Postgres records (max, not sum), and the alert fires only once it has
    lasted 15 minutes."""
    annotations = _annotations("FairlaneIdleHoldings", "1")
    _promtool_test(
        tmp_path,
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'fairlane_scheduler_idle_placements{instance="a"}',
                    "values": "0 1x30",
                },
                {
                    "series": 'fairlane_scheduler_idle_placements{instance="b"}',
                    "values": "0 1x30",
                },
            ],
            "promql_expr_test": [
                {
                    "expr": "fairlane:idle_placements:max",
                    "eval_time": "5m",
                    "exp_samples": [{"labels": "fairlane:idle_placements:max", "value": 1}],
                }
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "FairlaneIdleHoldings", "exp_alerts": []},
                {
                    "eval_time": "17m",
                    "alertname": "FairlaneIdleHoldings",
                    "exp_alerts": [
                        {"exp_labels": {"severity": "info"}, "exp_annotations": annotations}
                    ],
                },
            ],
        },
    )


def test_the_quarantine_alert_sums_the_scorer_workers(tmp_path: Path) -> None:
    """Each scorer worker binds its own partitions' GPUs (issue 35): the quarantined
    uuids of two workers add up, and the alert fires after a minute of any."""
    annotations = _annotations("FairlaneGpusQuarantined", "3")
    _promtool_test(
        tmp_path,
        {
            "interval": "1m",
            "input_series": [
                {"series": 'fairlane_scorer_quarantined_gpus{instance="a"}', "values": "0 2x10"},
                {"series": 'fairlane_scorer_quarantined_gpus{instance="b"}', "values": "0 1x10"},
            ],
            "promql_expr_test": [
                {
                    "expr": "fairlane:gpus_quarantined:sum",
                    "eval_time": "0m",
                    "exp_samples": [{"labels": "fairlane:gpus_quarantined:sum", "value": 0}],
                }
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "FairlaneGpusQuarantined", "exp_alerts": []},
                {
                    "eval_time": "3m",
                    "alertname": "FairlaneGpusQuarantined",
                    "exp_alerts": [
                        {"exp_labels": {"severity": "warning"}, "exp_annotations": annotations}
                    ],
                },
            ],
        },
    )


def test_refused_node_samples_alert_by_reason(tmp_path: Path) -> None:
    """A node whose samples the scorer refuses (a clock ahead, a missing key) shows in
    one alert per reason, across the workers' two counters (issue 35)."""
    annotations = {
        k: v.replace("{{ $value }}", "15").replace("{{ $labels.reason }}", "future")
        for k, v in _annotations("FairlaneNodeSamplesRefused", "15").items()
    }
    _promtool_test(
        tmp_path,
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'fairlane_scorer_samples_refused_total{instance="a",reason="future"}',
                    "values": "0+1x30",
                },
                {
                    "series": "fairlane_scorer_samples_unverified_total"
                    '{instance="a",reason="missing"}',
                    "values": "0x30",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "FairlaneNodeSamplesRefused", "exp_alerts": []},
                {
                    "eval_time": "20m",
                    "alertname": "FairlaneNodeSamplesRefused",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "reason": "future"},
                            "exp_annotations": annotations,
                        }
                    ],
                },
            ],
        },
    )


def _annotations(alert_name: str, value: str) -> dict[str, str]:
    """The alert's annotations as they read when its value is ``value``."""
    (alert,) = [r for r in rules() if r.get("alert") == alert_name]
    return {k: v.replace("{{ $value }}", value) for k, v in alert["annotations"].items()}


def _promtool_test(tmp_path: Path, case: dict[str, Any]) -> None:
    """One test case of promtool's rule tests, on the shipped rules (1 minute a step)."""
    shutil.copy(MONITORING / "rules.yml", tmp_path / "rules.yml")
    cases = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [case]}
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(cases))
    checked = subprocess.run(
        [debian_tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
