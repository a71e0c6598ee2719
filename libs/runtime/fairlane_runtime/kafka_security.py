"""How every Fairlane Kafka client authenticates: one value, built once from the settings.

    protocol         PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl_mechanism   SCRAM-SHA-256 | SCRAM-SHA-512 | PLAIN     (SASL_* only)
    ssl_cafile       the CA that signed the brokers' certificates (system CAs if None)
    ssl_certfile     a client certificate for mutual TLS, ssl_keyfile its key

:meth:`KafkaSecurity.aiokafka_kwargs` gives the arguments of aiokafka's producer,
consumer and admin client; the scorer turns the same value into ``faust.App``'s
``broker_credentials`` (``fairlane_scorer.app.faust_credentials``), which Faust maps back
onto the same aiokafka arguments. Passwords are :class:`pydantic.SecretStr`: a repr or a
log line shows ``**********``, never the value.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

__all__ = ["PLAINTEXT", "KafkaSecurity", "SaslMechanism", "SecurityProtocol"]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context that verifies the brokers (and presents our certificate)."""
        if not self.uses_ssl:
            return None
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH,
            cafile=str(self.ssl_cafile) if self.ssl_cafile is not None else None,
        )
        ctx.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile is not None:
            password = self.ssl_key_password
            ctx.load_cert_chain(
                self.ssl_certfile,
                self.ssl_keyfile,
                password=password.get_secret_value() if password is not None else None,
            )
        return ctx

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_ssl:
            kwargs["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password_value()
        return kwargs

    def sasl_password_value(self) -> str | None:
        return self.sasl_password.get_secret_value() if self.sasl_password is not None else None


PLAINTEXT = KafkaSecurity()
