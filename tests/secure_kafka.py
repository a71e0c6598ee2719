"""The broker of scripts/kafka.sh KAFKA_SASL_SSL=1 for the tests: where it listens, its CA,
and each service's SCRAM credentials, as the services read them (environment, files)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fairlane_runtime.kafka_security import KafkaSecurity
from fairlane_runtime.settings import ServiceSettings
from tests.servers import ROOT, TEST_KAFKA_SECURE_PORT, local_server


@dataclass(frozen=True)
class SecureKafka:
    operator: str  # PLAINTEXT, the super user (topics)
    bootstrap: str  # SASL_SSL
    ca: Path
    secrets: Path

    def env(self, user: str, *, password_file: Path | None = None) -> dict[str, str]:
        """The environment that makes a service ``user`` over SASL_SSL."""
        return {
            "FAIRLANE_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "FAIRLANE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FAIRLANE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FAIRLANE_KAFKA_SASL_USERNAME": user,
            "FAIRLANE_KAFKA_SASL_PASSWORD_FILE": str(
                password_file or self.secrets / f"{user}.password"
            ),
            "FAIRLANE_KAFKA_SSL_CAFILE": str(self.ca),
        }

    def security(self, user: str, *, password_file: Path | None = None) -> KafkaSecurity:
        """Built the way every service builds it: settings from the environment."""
        with pytest.MonkeyPatch.context() as mp:
            for name, value in self.env(user, password_file=password_file).items():
                mp.setenv(name, value)
            return ServiceSettings().kafka_security()


@contextlib.contextmanager
def secure_kafka(state: Path) -> Iterator[SecureKafka]:
    """A fresh SASL_SSL broker with the project's users and ACLs, purged afterwards."""
    env = {
        "KAFKA_PORT": TEST_KAFKA_SECURE_PORT,
        "KAFKA_SASL_SSL": "1",
        "FAIRLANE_STATE_DIR": str(state),
        "FAIRLANE_CACHE_DIR": os.environ.get("FAIRLANE_CACHE_DIR", str(ROOT / ".local/cache")),
    }
    with local_server("kafka.sh", env):
        inst = state / f"kafka-{TEST_KAFKA_SECURE_PORT}"
        yield SecureKafka(
            operator=f"127.0.0.1:{TEST_KAFKA_SECURE_PORT}",
            bootstrap=f"127.0.0.1:{int(TEST_KAFKA_SECURE_PORT) + 2}",
            ca=inst / "tls" / "ca.crt",
            secrets=inst / "sasl",
        )
