"""The agent's errors, under the one root (``fairlane_events.errors``).

    FairlaneError
     +-- AgentError                 the agent's own; the message says what to fix
     |    +-- NvmlUnavailableError  NVML could not start (no driver, no library, no GPU);
     |    |                         never retryable: it needs a person or a new node
     |    +-- HttpServeError        /metrics and /healthz cannot listen (port taken); never
     +-- ServerUnavailableError     Kafka does not answer at start-up; retryable
     |                              (fairlane_runtime; during a run the backlog rides it out)
     +-- ScenarioError              the simulated fleet's scenario is invalid (fairlane_sim)

Each of these ends the process at start-up with one line (``exit_with_error``); NVML
errors on one GPU during a run are not exceptions but ``healthy=False`` samples.
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = ["AgentError", "HttpServeError", "NvmlUnavailableError"]


class AgentError(FairlaneError):
    """Root of the agent's own errors."""


class NvmlUnavailableError(AgentError):
    """NVML could not start (no driver, no library, no GPU); not retryable."""


class HttpServeError(AgentError):
    """The agent's HTTP endpoint cannot listen where it was told to."""
