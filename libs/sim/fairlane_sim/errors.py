"""The simulator's errors, under the one root (``fairlane_events.errors``).

    FairlaneError
     +-- ScenarioError      a scenario file that does not follow the format; never retryable

The simulator is pure, so it raises only on bad input; the same input fails the same way.
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = ["ScenarioError"]


class ScenarioError(FairlaneError, ValueError):
    """A scenario file that does not follow the format; the message says where."""
