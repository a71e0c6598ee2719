import pytest

from fairlane_agent.settings import AgentSettings
from fairlane_scheduler.settings import SchedulerSettings


def test_standard_env_names_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@y/z")
    monkeypatch.setenv("FAIRLANE_THRESHOLD", "0.7")
    monkeypatch.setenv("FAIRLANE_NAMESPACE_TOKENS", '{"team-a": "s3cret"}')
    settings = SchedulerSettings()
    assert settings.kafka_bootstrap_servers == "k:1"
    assert settings.database_url.get_secret_value() == "postgresql://x@y/z"
    assert "postgresql://x@y/z" not in repr(settings)
    assert settings.threshold == 0.7
    assert settings.namespace_tokens["team-a"].get_secret_value() == "s3cret"


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRLANE_NODES", "3")
    settings = AgentSettings(
        _cli_parse_args=["--nodes", "5", "--interval-s", "2"], _cli_kebab_case=True
    )
    assert (settings.nodes, settings.interval_s) == (5, 2.0)


def test_invalid_port_range_is_refused() -> None:
    with pytest.raises(ValueError, match="master_port_first"):
        SchedulerSettings(master_port_first=30000, master_port_last=29000, auth_disabled=True)


def test_serving_without_tokens_must_be_explicit() -> None:
    with pytest.raises(ValueError, match="FAIRLANE_AUTH_DISABLED=true"):
        SchedulerSettings()
