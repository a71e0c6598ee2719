"""The settings base every service's settings model extends.

Environment variables use the ``FAIRLANE_`` prefix. ``KAFKA_BOOTSTRAP_SERVERS`` and
``DATABASE_URL`` are also read without it, because they are what the test fixtures,
docker-compose and most platforms already export.

The ``kafka_*`` security settings are one block for every Kafka client of every service
(:meth:`ServiceSettings.kafka_security`). A password may come from the environment or
from a file (``..._file``: a mounted Kubernetes Secret), never both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, FilePath, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fairlane_runtime.kafka_security import KafkaSecurity, SaslMechanism, SecurityProtocol

__all__ = ["ServiceSettings", "read_secret"]


def read_secret(value: SecretStr | None, path: Path | None) -> SecretStr | None:
    """The secret given directly, else the file's content without its final newline."""
    if path is None:
        return value
    return SecretStr(path.read_text().removesuffix("\n").removesuffix("\r"))


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FAIRLANE_", frozen=True, extra="ignore", cli_parse_args=False
    )

    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:19092",
        validation_alias=AliasChoices(
            "FAIRLANE_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS", "kafka_bootstrap_servers"
        ),
        description="host:port[,host:port] of the Kafka cluster",
    )
    kafka_security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        "SCRAM-SHA-512", description="SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (SASL_* only)"
    )
    kafka_sasl_username: str | None = Field(None, description="this service's Kafka principal")
    kafka_sasl_password: SecretStr | None = Field(None, description="its password")
    kafka_sasl_password_file: FilePath | None = Field(
        None, description="a file holding the password (a mounted Secret)"
    )
    kafka_ssl_cafile: FilePath | None = Field(
        None, description="CA of the brokers' certificates (default: the system's)"
    )
    kafka_ssl_certfile: FilePath | None = Field(None, description="client certificate (mutual TLS)")
    kafka_ssl_keyfile: FilePath | None = Field(None, description="the client certificate's key")
    kafka_ssl_key_password: SecretStr | None = Field(None, description="the key's password")
    kafka_ssl_key_password_file: FilePath | None = Field(
        None, description="a file holding the key's password"
    )
    kafka_ssl_check_hostname: bool = Field(
        True, description="check that a broker's certificate names its host"
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = Field(False, description="one JSON object per log line")

    @model_validator(mode="after")
    def _kafka_security_consistent(self) -> ServiceSettings:
        protocol = self.kafka_security_protocol
        sasl = protocol.startswith("SASL_")
        tls = protocol in ("SSL", "SASL_SSL")
        password_given = (self.kafka_sasl_password, self.kafka_sasl_password_file)
        if all(p is not None for p in password_given):
            raise ValueError("give kafka_sasl_password or kafka_sasl_password_file, not both")
        key_password = (self.kafka_ssl_key_password, self.kafka_ssl_key_password_file)
        if all(p is not None for p in key_password):
            raise ValueError("give kafka_ssl_key_password or kafka_ssl_key_password_file, not both")
        if sasl and (self.kafka_sasl_username is None or password_given == (None, None)):
            raise ValueError(
                f"kafka_security_protocol {protocol} needs kafka_sasl_username and "
                "kafka_sasl_password (or kafka_sasl_password_file)"
            )
        if not sasl and (self.kafka_sasl_username is not None or password_given != (None, None)):
            raise ValueError(
                f"SASL credentials are set but kafka_security_protocol is {protocol}: "
                "use SASL_SSL (or SASL_PLAINTEXT)"
            )
        tls_files = (self.kafka_ssl_cafile, self.kafka_ssl_certfile, self.kafka_ssl_keyfile)
        if not tls and any(f is not None for f in tls_files):
            raise ValueError(
                f"TLS files are set but kafka_security_protocol is {protocol}: use SSL or SASL_SSL"
            )
        if self.kafka_ssl_keyfile is not None and self.kafka_ssl_certfile is None:
            raise ValueError("kafka_ssl_keyfile needs kafka_ssl_certfile")
        return self

    def kafka_security(self) -> KafkaSecurity:
        """The one Kafka security value every client of this service is built with
        (reads the password files, so call it once, at the entry point)."""
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=read_secret(self.kafka_sasl_password, self.kafka_sasl_password_file),
            ssl_cafile=self.kafka_ssl_cafile,
            ssl_certfile=self.kafka_ssl_certfile,
            ssl_keyfile=self.kafka_ssl_keyfile,
            ssl_key_password=read_secret(
                self.kafka_ssl_key_password, self.kafka_ssl_key_password_file
            ),
            ssl_check_hostname=self.kafka_ssl_check_hostname,
        )
