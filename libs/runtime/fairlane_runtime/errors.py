"""Errors shared by the services' edges.

    FairlaneError
     +-- ServerUnavailableError     a server (Kafka, Postgres) cannot be reached; retryable
     +-- TopicMismatchError         a topic exists with the wrong partition count; not retryable

``retryable`` tells a caller whether waiting and trying again can help.
"""

from __future__ import annotations

__all__ = ["FairlaneError", "ServerUnavailableError", "TopicMismatchError"]


class FairlaneError(Exception):
    retryable: bool = False


class ServerUnavailableError(FairlaneError):
    """A server this process needs did not answer. The message says which and where."""

    retryable = True


class TopicMismatchError(FairlaneError):
    """A topic exists but not as the contract says (partitions); fix it, do not retry."""
