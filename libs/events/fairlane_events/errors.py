"""The root of every Fairlane error, and the wire contract's own.

Every package draws its own tree in its ``errors.py``, rooted here; this root lives in
the wire-contract library because it is the one library every package may import
(pure libraries and service cores may not import ``fairlane_runtime``)::

    FairlaneError                       root; ``retryable`` says if trying again can help
     +-- DecodeError                    a record that is not JSON or not its schema; never
     |                                  (fairlane_events)
     +-- SignatureError                 a node sample not signed by its node's key; never
     +-- KeyFileError                   a key ring or node key that cannot be used; never
     |                                  (both fairlane_events.signing)
     +-- ScenarioError                  a simulator scenario is invalid; never (fairlane_sim)
     +-- ServerUnavailableError         Kafka or Postgres does not answer; retryable
     +-- TopicMismatchError             a topic exists, not as the contract says; never
     |                                  (both fairlane_runtime)
     +-- AgentError, ScorerError, SchedulerError, EvalError
                                        each service's (and the evaluator's) tree, in
                                        its errors.py

``retryable`` is a class attribute, so a caller can decide from the type alone.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["DecodeError", "FairlaneError", "KeyFileError", "SignatureError"]


class FairlaneError(Exception):
    """Root of every error Fairlane raises on purpose."""

    retryable: ClassVar[bool] = False


class DecodeError(FairlaneError, ValueError):
    """A record that is not valid JSON or does not match its schema (never retryable:
    the same bytes fail the same way; they go to the dead-letter topic)."""


class KeyFileError(FairlaneError, ValueError):
    """A key ring or node key file that cannot be used (a deployment error; never
    retryable)."""


class SignatureError(FairlaneError):
    """A record whose signature is missing, unknown or wrong (never retryable: it goes to
    the dead-letter topic). ``reason`` is a short label for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
