"""Kafka helpers shared by the services: topic creation/checking and a clear error
when the broker is not there."""

from __future__ import annotations

import argparse
import asyncio
import ssl
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
)
from pydantic import ValidationError

from fairlane_events.topics import ALL_TOPICS, TopicSpec
from fairlane_runtime.errors import KafkaSecurityError, ServerUnavailableError, TopicMismatchError
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity
from fairlane_runtime.settings import ServiceSettings

__all__ = ["ensure_topics", "kafka_admin", "topic_partitions"]

_EXISTS = 36  # another process created it first: fine
_TOPIC_DENIED = 29
_ERRORS = {
    _TOPIC_DENIED: "not authorized to create it (ACL); create it with the operator's "
    "principal, e.g. the topics job",
    31: "not authorized on the cluster (ACL); create it with the operator's principal",
}
_VISIBLE_WITHIN_S = 15.0


async def kafka_admin(
    bootstrap: str, *, security: KafkaSecurity = PLAINTEXT, timeout_s: float = 15.0
) -> AIOKafkaAdminClient:
    """A started admin client, or :class:`ServerUnavailableError` naming the address."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, **security.aiokafka_kwargs()
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (KafkaConnectionError, KafkaError, TimeoutError, OSError) as exc:
        await admin.close()
        if security.protocol != "PLAINTEXT":
            await _raise_if_refused(bootstrap, security)
        raise ServerUnavailableError(
            f"Kafka is not reachable at {bootstrap} ({type(exc).__name__}); "
            "start it with `scripts/kafka.sh up` or set KAFKA_BOOTSTRAP_SERVERS"
        ) from exc
    return admin


async def _raise_if_refused(bootstrap: str, security: KafkaSecurity) -> None:
    """Tell a refusal from an absence: aiokafka's bootstrap logs why each broker failed
    but raises only "Unable to bootstrap", so one connection is opened by hand to see the
    reason. Raises :class:`KafkaSecurityError` for bad credentials or an untrusted
    certificate; returns for anything else (the broker is then simply unreachable)."""
    host, _, port = bootstrap.split(",", maxsplit=1)[0].strip().rpartition(":")
    try:
        conn = await asyncio.wait_for(
            create_conn(host, int(port), request_timeout_ms=5000, **security.aiokafka_kwargs()),
            10,
        )
    except (SaslAuthenticationFailed, AuthenticationFailedError) as exc:
        raise KafkaSecurityError(
            f"Kafka at {bootstrap} refused the credentials of {security.sasl_username!r} "
            f"({security.sasl_mechanism}): check kafka_sasl_username and the password"
        ) from exc
    except ssl.SSLCertVerificationError as exc:
        raise KafkaSecurityError(
            f"Kafka's certificate at {bootstrap} was refused ({exc.verify_message}): "
            "check kafka_ssl_cafile and the broker's host name"
        ) from exc
    except (KafkaError, TimeoutError, OSError, ValueError):
        return
    conn.close()


async def topic_partitions(admin: AIOKafkaAdminClient, names: Iterable[str]) -> dict[str, int]:
    """Partition counts of the topics that exist among ``names``.

    Asks for the topics by name: a full listing can lag a creation that just happened.
    """
    wanted = list(names)
    if not wanted:
        return {}
    described = await admin.describe_topics(wanted)
    return {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}


async def _unauthorized(admin: AIOKafkaAdminClient, names: list[str]) -> set[str]:
    """Those of ``names`` the broker will not even describe to this principal."""
    described = await admin.describe_topics(names)
    return {t["topic"] for t in described if t["error_code"] == _TOPIC_DENIED}


async def _check_partitions(
    admin: AIOKafkaAdminClient, specs: list[TopicSpec], *, wait_visible_s: float = 0.0
) -> set[str]:
    """Raise on a partition mismatch among existing topics; return the names that exist.

    With ``wait_visible_s``, wait that long for every topic to show in the metadata: on a
    young broker a topic the controller already has can stay invisible for seconds.
    """
    deadline = asyncio.get_running_loop().time() + wait_visible_s
    current = await topic_partitions(admin, (s.name for s in specs))
    while len(current) < len(specs) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        current = await topic_partitions(admin, (s.name for s in specs))
    wrong = [
        f"{s.name} has {current[s.name]} partitions, expected {s.partitions}"
        for s in specs
        if s.name in current and current[s.name] != s.partitions
    ]
    if wrong:
        raise TopicMismatchError("; ".join(wrong))
    return set(current)


async def ensure_topics(
    bootstrap: str,
    specs: Iterable[TopicSpec] = ALL_TOPICS,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create missing topics; fail loudly when one exists with another partition count.

    A source topic whose partition count differs from a Faust table's changelog crash-loops
    the agent while the worker stays up, so a mismatch must stop start-up instead.
    Returns the names created.
    """
    specs = list(specs)
    admin = await kafka_admin(bootstrap, security=security)
    try:
        existing = await _check_partitions(admin, specs)
        missing = [s for s in specs if s.name not in existing]
        if missing:  # under ACLs, a topic this principal may not see is not its business
            hidden = await _unauthorized(admin, [s.name for s in missing])
            missing = [s for s in missing if s.name not in hidden]
        if not missing:
            return []
        response = await admin.create_topics(
            [NewTopic(s.name, s.partitions, 1, topic_configs=dict(s.configs)) for s in missing]
        )
        failed = [
            f"{e[0]}: {_ERRORS.get(e[1], f'error code {e[1]}')}"
            for e in response.topic_errors
            if e[1] not in (0, _EXISTS)
        ]
        if failed:
            raise TopicMismatchError("could not create topics: " + "; ".join(failed))
        # The metadata lagged behind a creation (ours earlier, or another process's).
        raced = {e[0] for e in response.topic_errors if e[1] == _EXISTS}
        await _check_partitions(
            admin, [s for s in missing if s.name in raced], wait_visible_s=_VISIBLE_WITHIN_S
        )
        return [e[0] for e in response.topic_errors if e[1] == 0]
    finally:
        await admin.close()


def main() -> None:
    """``python -m fairlane_runtime.kafka --bootstrap HOST:PORT``: create Fairlane's topics,
    authenticating with the ``FAIRLANE_KAFKA_*`` security settings of the environment (the
    operator's principal, which may create topics)."""
    parser = argparse.ArgumentParser(description="Create Fairlane's Kafka topics if missing.")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    args = parser.parse_args()
    try:
        security = ServiceSettings().kafka_security()
    except ValidationError as exc:
        raise SystemExit(f"error: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    try:
        created = asyncio.run(ensure_topics(args.bootstrap, security=security))
    except (ServerUnavailableError, TopicMismatchError, KafkaSecurityError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"topics ready ({len(created)} created: {', '.join(created) or 'none'})")


if __name__ == "__main__":
    main()
