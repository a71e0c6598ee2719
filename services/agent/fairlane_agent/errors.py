"""The agent's errors, under the one root (``fairlane_events.errors``).

    FairlaneError
     +-- AgentError                 the agent's own; the message says what to fix
     |    +-- NvmlUnavailableError  NVML could not start (no driver, no library, no GPU);
     |    |                         never retryable: it needs a person or a new node
     |    +-- HttpServeError        /metrics and /healthz cannot listen (port taken); never
     |    +-- DcgmScrapeError       one dcgm-exporter could not be read this round
     |         |                    (refused, timed out, HTTP error); retryable: the
     |         |                    next round tries again
     |         +-- DcgmFormatError  what it answered is not a Prometheus exposition;
     |                              never (until the exporter changes)
     +-- ServerUnavailableError     Kafka does not answer at start-up; retryable
     |                              (fairlane_runtime; during a run the backlog rides it out)
     +-- ScenarioError              the simulated fleet's scenario is invalid (fairlane_sim)

Each of these ends the process at start-up with one line (``exit_with_error``), except
the DCGM scrape errors: the bridge logs them (once per outage), counts them and carries
on with the other exporters. NVML errors on one GPU during a run are not exceptions but
``healthy=False`` samples.
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = [
    "AgentError",
    "DcgmFormatError",
    "DcgmScrapeError",
    "HttpServeError",
    "NvmlUnavailableError",
]


class AgentError(FairlaneError):
    """Root of the agent's own errors."""


class NvmlUnavailableError(AgentError):
    """NVML could not start (no driver, no library, no GPU); not retryable."""


class HttpServeError(AgentError):
    """The agent's HTTP endpoint cannot listen where it was told to."""


class DcgmScrapeError(AgentError):
    """One dcgm-exporter could not be read this round; the next round tries again."""

    retryable = True


class DcgmFormatError(DcgmScrapeError, ValueError):
    """A dcgm-exporter's answer is not a Prometheus exposition."""

    retryable = False
