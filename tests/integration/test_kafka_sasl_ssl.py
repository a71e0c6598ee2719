"""Kafka over SASL_SSL with SCRAM users and ACLs, from scripts/kafka.sh KAFKA_SASL_SSL=1:
each service's principal does what its ACLs allow and nothing else, and a wrong password
or an untrusted certificate is one clear, non-retryable error (exit code 2 for a service).

Always the script's own broker on its own ports (FAIRLANE_TEST_KAFKA_SECURE_PORT, its
SASL_SSL listener two above): a KAFKA_BOOTSTRAP_SERVERS from the environment has neither
these users nor these ACLs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError

from fairlane_agent.publisher import SamplePublisher
from fairlane_events.topics import GPU_SCORES, GPU_SPEEDS, JOB_PROGRESS, NODE_SAMPLES, PLACEMENTS
from fairlane_runtime.errors import KafkaSecurityError
from fairlane_runtime.kafka import ensure_topics
from fairlane_runtime.kafka_security import KafkaSecurity
from tests.factories import node_sample
from tests.processes import failed_start
from tests.secure_kafka import SecureKafka, secure_kafka
from tests.tls import self_signed

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    with secure_kafka(tmp_path_factory.mktemp("kafka-sasl")) as broker:
        yield broker


async def _send(kafka: SecureKafka, user: str, topic: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap, **kafka.security(user).aiokafka_kwargs()
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", key=b"k")
    finally:
        await producer.stop()


async def test_each_principal_does_what_its_acls_allow_and_nothing_else(
    kafka: SecureKafka,
) -> None:
    await ensure_topics(kafka.operator)  # the operator's (topics job's) principal
    agent = kafka.security("fairlane-agent")
    # The agent's own checks see only its topics, and create nothing.
    assert await ensure_topics(kafka.bootstrap, security=agent) == []
    publisher = SamplePublisher(kafka.bootstrap, security=agent)
    await publisher.start()
    try:
        assert await publisher.send_batch([node_sample("sasl-node")]) == [None]
    finally:
        await publisher.stop()
    await _send(kafka, "fairlane-scheduler", PLACEMENTS)
    await _send(kafka, "fairlane-scorer", GPU_SCORES)
    await _send(kafka, "fairlane-scorer", GPU_SPEEDS)  # the learner's output
    await _send(kafka, "fairlane-launcher", JOB_PROGRESS)  # what a job reports
    for user, topic in [
        ("fairlane-launcher", GPU_SPEEDS),  # a job cannot forge what was learned
        ("fairlane-launcher", PLACEMENTS),  # ...nor placements
        ("fairlane-agent", JOB_PROGRESS),
        ("fairlane-agent", GPU_SCORES),  # an agent cannot forge scores
        ("fairlane-agent", GPU_SPEEDS),  # ...nor learned speeds
        ("fairlane-scheduler", NODE_SAMPLES),
        ("fairlane-scorer", PLACEMENTS),
    ]:
        with pytest.raises(TopicAuthorizationFailedError):
            await _send(kafka, user, topic)


async def test_a_wrong_password_is_one_clear_non_retryable_error(
    kafka: SecureKafka, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    security = kafka.security("fairlane-agent", password_file=wrong)
    with pytest.raises(KafkaSecurityError, match="refused the credentials of 'fairlane-agent'"):
        await ensure_topics(kafka.bootstrap, security=security)


async def test_an_untrusted_broker_certificate_is_refused(
    kafka: SecureKafka, tmp_path: Path
) -> None:
    other_ca, _ = self_signed(tmp_path, "other-ca")
    security = KafkaSecurity(**{**vars(kafka.security("fairlane-agent")), "ssl_cafile": other_ca})
    with pytest.raises(KafkaSecurityError, match=r"certificate .* was refused"):
        await ensure_topics(kafka.bootstrap, security=security)


def test_the_agent_exits_2_with_one_line_on_a_wrong_password(
    kafka: SecureKafka, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password")
    code, errors = failed_start(
        "fairlane_agent",
        ["--backend", "sim", "--nodes", "1"],
        kafka.env("fairlane-agent", password_file=wrong),
    )
    assert code == 2
    assert errors == [
        f"fairlane-agent: error: Kafka at {kafka.bootstrap} refused the credentials of "
        "'fairlane-agent' (SCRAM-SHA-512): check kafka_sasl_username and the password"
    ]
