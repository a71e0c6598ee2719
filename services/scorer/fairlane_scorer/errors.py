"""The scorer's errors, under the one root (``fairlane_events.errors``).

FairlaneError
 +-- ScorerError                the scorer's own
 |    +-- NodeRowFormatError    a node-windows row in an unknown format (a changelog
 |    |                         written by another version); never retryable
 |    +-- SpeedRowFormatError   a learned-speed row in an unknown format; never retryable
 |    +-- SpeedInputFormatError a record of the learner's input topic in an unknown
 |    |                         format: dead-lettered and counted, never retryable
 |    +-- HeldRowFormatError    a held-progress row in an unknown format; never retryable
 +-- DecodeError                a consumed record is not its schema; never retryable:
 |                              dead-lettered and counted, never raised out of an agent
 +-- ServerUnavailableError, TopicMismatchError
                                Kafka at start-up (fairlane_runtime)
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = [
    "HeldRowFormatError",
    "NodeRowFormatError",
    "ScorerError",
    "SpeedInputFormatError",
    "SpeedRowFormatError",
]


class ScorerError(FairlaneError):
    """Root of the scorer's own errors."""


class NodeRowFormatError(ScorerError, ValueError):
    """A stored node row this version cannot read."""


class SpeedRowFormatError(ScorerError, ValueError):
    """A stored learned-speed row this version cannot read."""


class SpeedInputFormatError(ScorerError, ValueError):
    """A record of the learner's input topic this version cannot read."""


class HeldRowFormatError(ScorerError, ValueError):
    """A stored held-progress row this version cannot read."""
