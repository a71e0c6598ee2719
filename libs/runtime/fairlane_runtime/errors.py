"""Errors of the services' shared edges (Kafka and Postgres), under the one root.

    FairlaneError                    (fairlane_events.errors, re-exported here)
     +-- ServerUnavailableError      a server (Kafka, Postgres) cannot be reached; retryable
     +-- KafkaSecurityError          Kafka refused our credentials, or we refused its
                                     certificate; never (fix the configuration)
     +-- TopicMismatchError          a topic exists with the wrong partition count; never

``retryable`` tells a caller whether waiting and trying again can help.
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = ["FairlaneError", "KafkaSecurityError", "ServerUnavailableError", "TopicMismatchError"]


class ServerUnavailableError(FairlaneError):
    """A server this process needs did not answer. The message says which and where."""

    retryable = True


class KafkaSecurityError(FairlaneError):
    """Authentication failed either way (SASL credentials, TLS certificate): waiting
    cannot help, and retrying a wrong password only fills the broker's log."""


class TopicMismatchError(FairlaneError):
    """A topic exists but not as the contract says (partitions); fix it, do not retry."""
