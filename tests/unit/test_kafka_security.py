"""One Kafka security block for every client: the settings, and what each client of
each service is built with (aiokafka's producer, consumer and admin; Faust's app)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import SecretStr

import fairlane_agent.placements
import fairlane_agent.publisher
import fairlane_runtime.kafka
import fairlane_scheduler.adapters.outbox
import fairlane_scheduler.adapters.scores
from fairlane_agent.publisher import SamplePublisher
from fairlane_events.topics import GPU_SCORES
from fairlane_runtime.kafka_security import KafkaSecurity
from fairlane_runtime.outage import OutageLog
from fairlane_runtime.settings import ServiceSettings
from fairlane_scheduler.adapters.outbox import OutboxRelay
from fairlane_scheduler.adapters.scores import ScoresFollower
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scorer.app import _faust_app, faust_credentials
from fairlane_scorer.settings import ScorerSettings
from tests.node_keys import TEST_KEY_RING
from tests.tls import self_signed

PASSWORD = "hunter2-very-secret"


@pytest.fixture(scope="module")
def client_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate and key, made at test time (never committed)."""
    return self_signed(tmp_path_factory.mktemp("kafka-tls"), "fairlane-agent")


def _sasl_ssl(tmp_path: Path, cert: Path, key: Path) -> ServiceSettings:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")  # as `kubectl create secret --from-file` may leave it
    return ServiceSettings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="fairlane-agent",
        kafka_sasl_password_file=secret,
        kafka_ssl_cafile=cert,  # self-signed: its own CA
        kafka_ssl_certfile=cert,
        kafka_ssl_keyfile=key,
    )


def test_the_password_comes_from_its_file_and_is_never_shown(
    tmp_path: Path, client_cert: tuple[Path, Path]
) -> None:
    settings = _sasl_ssl(tmp_path, *client_cert)
    security = settings.kafka_security()
    assert security.sasl_password_value() == PASSWORD
    for shown in (repr(settings), str(settings), repr(security), str(security)):
        assert PASSWORD not in shown
    assert PASSWORD not in repr(faust_credentials(security))


def test_plaintext_adds_nothing_but_the_protocol() -> None:
    security = ServiceSettings().kafka_security()
    assert security.aiokafka_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert faust_credentials(security) == {}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_plaintext_gives_aiokafka_the_mechanism_and_credentials(mechanism: str) -> None:
    security = KafkaSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="u",
        sasl_password=SecretStr("p"),
    )
    assert security.aiokafka_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }
    faust_auth = credentials_to_aiokafka_auth(faust_credentials(security)["broker_credentials"])
    assert faust_auth == {**security.aiokafka_kwargs(), "ssl_context": None}


def test_sasl_ssl_verifies_the_brokers_and_presents_the_client_certificate(
    tmp_path: Path, client_cert: tuple[Path, Path]
) -> None:
    kwargs = _sasl_ssl(tmp_path, *client_cert).kafka_security().aiokafka_kwargs()
    ctx = kwargs.pop("ssl_context")
    assert isinstance(ctx, ssl.SSLContext)
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "fairlane-agent"),),)]
    assert kwargs == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "fairlane-agent",
        "sasl_plain_password": PASSWORD,
    }


def test_ssl_alone_is_mutual_tls_without_sasl(client_cert: tuple[Path, Path]) -> None:
    cert, key = client_cert
    settings = ServiceSettings(
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=cert,
        kafka_ssl_certfile=cert,
        kafka_ssl_keyfile=key,
    )
    security = settings.kafka_security()
    assert set(security.aiokafka_kwargs()) == {"security_protocol", "ssl_context"}
    faust_auth = credentials_to_aiokafka_auth(faust_credentials(security)["broker_credentials"])
    assert faust_auth["security_protocol"] == "SSL"
    assert isinstance(faust_auth["ssl_context"], ssl.SSLContext)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "needs kafka_sasl_username"),
        (
            {"kafka_sasl_username": "u", "kafka_sasl_password": "p"},
            "SASL credentials are set but kafka_security_protocol is PLAINTEXT",
        ),
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_username": "u",
                "kafka_sasl_password": "p",
                "kafka_ssl_cafile": __file__,
            },
            "TLS files are set but kafka_security_protocol is SASL_PLAINTEXT",
        ),
        (
            {
                "kafka_security_protocol": "SASL_SSL",
                "kafka_sasl_username": "u",
                "kafka_sasl_password": "p",
                "kafka_sasl_password_file": __file__,
            },
            "not both",
        ),
    ],
)
def test_inconsistent_security_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServiceSettings(**settings)


# --- every client is built with the block -------------------------------------------


class _BuiltError(Exception):
    """Raised by the recording client class: the arguments are all the test needs."""


class _Recorder:
    seen: list[dict[str, Any]]

    def __init__(self, *_topics: str, **kwargs: Any) -> None:
        type(self).seen.append(kwargs)
        raise _BuiltError


def _recorder(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(module, name, type(name, (_Recorder,), {"seen": seen}))
    return seen


SECURITY = KafkaSecurity(
    protocol="SASL_PLAINTEXT",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="svc",
    sasl_password=SecretStr("pw"),
)
EXPECTED = SECURITY.aiokafka_kwargs()


def _has_security(kwargs: dict[str, Any]) -> bool:
    return all(kwargs.get(k) == v for k, v in EXPECTED.items())


async def test_the_agents_producer_and_placements_consumer_get_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    producers = _recorder(monkeypatch, fairlane_agent.publisher, "AIOKafkaProducer")
    consumers = _recorder(monkeypatch, fairlane_agent.placements, "AIOKafkaConsumer")
    with pytest.raises(_BuiltError):
        SamplePublisher("k:9093", security=SECURITY)
    with pytest.raises(_BuiltError):
        await fairlane_agent.placements.follow_placements(
            "k:9093",
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            security=SECURITY,
        )
    assert _has_security(producers[0])
    assert producers[0]["enable_idempotence"] is True  # its own settings stay
    assert _has_security(consumers[0])


async def test_the_topic_admin_gets_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    admins = _recorder(monkeypatch, fairlane_runtime.kafka, "AIOKafkaAdminClient")
    with pytest.raises(_BuiltError):
        await fairlane_runtime.kafka.ensure_topics("k:9093", security=SECURITY)
    assert _has_security(admins[0])


async def test_the_schedulers_scores_follower_gets_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admins: list[KafkaSecurity] = []

    class _Admin:
        async def close(self) -> None:
            pass

    async def fake_admin(bootstrap: str, *, security: KafkaSecurity) -> _Admin:
        admins.append(security)
        return _Admin()

    async def fake_partitions(admin: object, names: object) -> dict[str, int]:
        return {GPU_SCORES: 3}

    scores = fairlane_scheduler.adapters.scores
    monkeypatch.setattr(scores, "kafka_admin", fake_admin)
    monkeypatch.setattr(scores, "topic_partitions", fake_partitions)
    consumers = _recorder(monkeypatch, scores, "AIOKafkaConsumer")
    follower = ScoresFollower("k:9093", FleetView(StabilityPolicy(0.65, 0)), security=SECURITY)
    with pytest.raises(_BuiltError):
        await follower.start()
    assert admins == [SECURITY]
    assert _has_security(consumers[0])


async def test_the_schedulers_outbox_producer_gets_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class _Conn:
        async def execute(self, *_: object) -> None:
            pass

        def get_server_pid(self) -> int:
            return 1

        async def add_listener(self, *_: object) -> None:
            pass

    class _Pool:
        @asynccontextmanager
        async def acquire(self) -> AsyncIterator[_Conn]:
            yield _Conn()

    class _Counter:
        def inc(self, amount: float = 1) -> None:
            pass

    def outage() -> OutageLog:
        return OutageLog(logging.getLogger("test"), "relay", _Counter())

    producers = _recorder(monkeypatch, fairlane_scheduler.adapters.outbox, "AIOKafkaProducer")
    relay = OutboxRelay(
        _Pool(),
        "k:9093",
        postgres_outage=outage(),
        kafka_outage=outage(),
        security=SECURITY,
    )
    with pytest.raises(_BuiltError):
        await relay._lead()
    assert _has_security(producers[0])


def test_the_scorers_faust_app_gets_the_block(
    tmp_path: Path, client_cert: tuple[Path, Path]
) -> None:
    cert, _ = client_cert
    secret = tmp_path / "password"
    secret.write_text(PASSWORD)
    settings = ScorerSettings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_username="fairlane-scorer",
        kafka_sasl_password_file=secret,
        kafka_ssl_cafile=cert,
        data_dir=tmp_path,
        sample_key_ring_file=TEST_KEY_RING,
    )
    app = _faust_app(settings)
    auth = dict(credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context))
    assert isinstance(auth.pop("ssl_context"), ssl.SSLContext)
    assert auth == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "fairlane-scorer",
        "sasl_plain_password": PASSWORD,
    }
