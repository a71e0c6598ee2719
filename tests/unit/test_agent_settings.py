"""The agent's settings: scenario choice and what wins over what."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from fairlane_agent.metrics import AgentMetrics
from fairlane_agent.settings import AgentSettings
from fairlane_agent.sources import open_source
from fairlane_sim.fleet import FleetSimulator
from fairlane_sim.scenario import ScenarioError


def settings(*flags: str) -> AgentSettings:
    return AgentSettings(_cli_parse_args=list(flags), _cli_kebab_case=True)


def test_shipped_scenario_by_name_sets_the_fleet_unless_a_flag_says_otherwise() -> None:
    chosen = settings("--scenario", "failing-gpu", "--gpus-per-node", "2")
    spec = chosen.fleet_spec(chosen.load_scenario())
    assert (spec.nodes, spec.gpus_per_node, spec.models) == (4, 2, ("A100-80GB", "H100"))


def test_environment_also_wins_over_the_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRLANE_NODES", "3")
    chosen = settings("--scenario", "hot-aisle")
    assert chosen.fleet_spec(chosen.load_scenario()).nodes == 3


def test_scenario_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n[fleet]\nnodes = 2\n[[events]]\nkind = "spike"\n')
    scenario = settings("--scenario", str(path)).load_scenario()
    assert (scenario.name, scenario.fleet, len(scenario.events)) == ("mine", {"nodes": 2}, 1)


def test_missing_scenario_file_is_named() -> None:
    with pytest.raises(ScenarioError, match=r"scenario file not found: nowhere\.toml"):
        settings("--scenario", "nowhere.toml").load_scenario()


def test_no_scenario_is_a_calm_fleet_from_the_flags() -> None:
    chosen = settings("--nodes", "2")
    scenario = chosen.load_scenario()
    assert scenario.events == ()
    assert chosen.fleet_spec(scenario).nodes == 2


def test_dcgm_urls_come_from_repeated_flags_or_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = "http://gpu-node-1:9400/metrics", "http://gpu-node-2:9400/metrics"
    assert settings("--backend", "dcgm", "--dcgm-url", a, "--dcgm-url", b).dcgm_url == [a, b]
    monkeypatch.setenv("FAIRLANE_DCGM_URL", f"{a}, {b}")
    assert settings("--backend", "dcgm").dcgm_url == [a, b]
    monkeypatch.setenv("FAIRLANE_DCGM_URL", f'["{a}"]')
    assert settings("--backend", "dcgm").dcgm_url == [a]


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--dcgm-url", "gpu-node-1:9400"], "not an http(s) URL: 'gpu-node-1:9400'"),
        (["--dcgm-url", "http://n/metrics", "--dcgm-timeout-s", "40"], "must not exceed"),
        ([], "--backend dcgm needs --dcgm-url"),
    ],
)
def test_dcgm_settings_are_checked(flags: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        settings("--backend", "dcgm", *flags)


def test_a_simulated_fleet_with_slow_gpus_writes_their_hidden_speeds(tmp_path: Path) -> None:
    path = tmp_path / "run" / "hidden-speeds.json"
    chosen = settings(
        "--backend", "sim", "--nodes", "2", "--slow-fraction", "0.25", "--slow-speed", "0.4",
        "--slow-classes", '["resnet50"]', "--hidden-speeds-file", str(path),
    )  # fmt: skip
    nvml_never_loaded = lambda: pytest.fail("sim never loads NVML")  # noqa: E731
    with open_source(chosen, nvml_never_loaded, AgentMetrics.create()) as source:
        assert isinstance(source, FleetSimulator)
        assert orjson.loads(path.read_bytes()) == source.hidden_speeds()
        assert len(source.slow) == 4
        slow = next(iter(source.slow))
        assert source.job_speed(slow, "resnet50") < 0.5 < source.job_speed(slow, "bert")
