"""The scheduler's exceptions; ``api/errors.py`` maps each to one HTTP status.

SchedulerError
 +-- NotFoundError            no such placement                       404
 +-- JobConflictError         job id reused with a different body     409
 +-- NoCapacityError          nothing qualifies now (with reasons)    409
 +-- NotReadyError            no score data yet (retryable)           503
 +-- DatabaseUnavailableError Postgres does not answer (retryable)    503
 +-- AllocationConflictError  another replica took a GPU/port first; retried inside
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AllocationConflictError",
    "DatabaseUnavailableError",
    "ForbiddenError",
    "JobConflictError",
    "NoCapacityError",
    "NotFoundError",
    "NotLiveError",
    "NotReadyError",
    "QuotaExceededError",
    "SchedulerError",
    "UnauthorizedError",
]


class SchedulerError(Exception):
    retryable: bool = False


class UnauthorizedError(SchedulerError):
    pass


class ForbiddenError(SchedulerError):
    pass


class NotFoundError(SchedulerError):
    pass


class JobConflictError(SchedulerError):
    pass


class NoCapacityError(SchedulerError):
    retryable = True  # capacity, scores and cooling change

    def __init__(self, message: str, reasons: Mapping[str, int]) -> None:
        super().__init__(message)
        self.reasons = dict(reasons)


class NotLiveError(SchedulerError):
    pass


class QuotaExceededError(SchedulerError):
    def __init__(self, message: str, *, ever: bool) -> None:
        super().__init__(message)
        self.ever = ever  # could it fit once the namespace releases GPUs?
        self.retryable = ever


class NotReadyError(SchedulerError):
    retryable = True


class DatabaseUnavailableError(SchedulerError):
    retryable = True


class AllocationConflictError(SchedulerError):
    retryable = True
