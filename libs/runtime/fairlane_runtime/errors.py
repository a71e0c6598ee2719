"""Errors of the services' shared edges (Kafka and Postgres), under the one root.

    FairlaneError                    (fairlane_events.errors, re-exported here)
     +-- ServerUnavailableError      a server (Kafka, Postgres) cannot be reached; retryable
     +-- TopicMismatchError          a topic exists with the wrong partition count; never

``retryable`` tells a caller whether waiting and trying again can help.
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = ["FairlaneError", "ServerUnavailableError", "TopicMismatchError"]


class ServerUnavailableError(FairlaneError):
    """A server this process needs did not answer. The message says which and where."""

    retryable = True


class TopicMismatchError(FairlaneError):
    """A topic exists but not as the contract says (partitions); fix it, do not retry."""
