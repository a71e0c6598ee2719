"""The scheduler's exceptions, under the one root (``fairlane_events.errors``).

``api/errors.py`` holds the one table from these to HTTP answers; ``retryable`` says
whether the same request can succeed later (429 and 503 answers carry Retry-After).

    FairlaneError
     +-- SchedulerError                                               HTTP  retryable
          +-- UnauthorizedError      no valid bearer token            401   no
          +-- BodyTimeoutError       the body came too slowly         408   no
          +-- BodyTooLargeError      the body is over its limit       413   no
          +-- ForbiddenError         another namespace's, or admin    403   no
          +-- NotFoundError          no such placement                404   no
          +-- JobConflictError       job id reused, different body    409   no
          +-- NoCapacityError        nothing qualifies now (reasons)  409   yes
          +-- NotLiveError           the placement already ended      409   no
          +-- QuotaExceededError     over the namespace's quota
          |    +-- QuotaBusyError    fits once the namespace frees    429   yes
          |    +-- QuotaNeverFitsError  larger than the quota itself  403   no
          +-- NotReadyError          no score data yet                503   yes
          +-- DatabaseUnavailableError  Postgres does not answer      503   yes
          +-- DatabaseTlsError       Postgres's certificate refused   start-up; no
                                     (untrusted CA, wrong host name)
          +-- AllocationConflictError   another replica took a GPU or
          |                             port first; retried inside    --    yes
          +-- PodError               an extender pod we cannot read;  200, in the
          |                          answered in the protocol's       extender's
          |                          ``Error`` field                  ``Error``; no
          +-- MigrationError         the schema migrations cannot     start-up; no
          |                          apply (one changed after it ran)
          +-- TokenFileError         API tokens that cannot be read   start-up, or
          |                          or parsed (names where, never    kept the last
          |                          the token)                       table; no
          +-- KubeApiError           the Kubernetes API refused or    --; no (the
                                     failed a request (``status``)    loops retry
                                                                      on their period)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from fairlane_events.errors import FairlaneError

__all__ = [
    "AllocationConflictError",
    "BodyTimeoutError",
    "BodyTooLargeError",
    "DatabaseTlsError",
    "DatabaseUnavailableError",
    "ForbiddenError",
    "JobConflictError",
    "KubeApiError",
    "MigrationError",
    "NoCapacityError",
    "NotFoundError",
    "NotLiveError",
    "NotReadyError",
    "PodError",
    "QuotaBusyError",
    "QuotaExceededError",
    "QuotaNeverFitsError",
    "SchedulerError",
    "TokenFileError",
    "UnauthorizedError",
]


class SchedulerError(FairlaneError):
    """Root of the scheduler's errors."""


class UnauthorizedError(SchedulerError):
    pass


class BodyTimeoutError(SchedulerError):
    """The request's body was not all there within the deadline: a slow client, or one
    that trickles bytes to hold a worker (sent again at the same pace, it fails again)."""


class BodyTooLargeError(SchedulerError):
    """The request's body (declared, or counted as it came) passes its route's limit."""


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
    """Over the namespace's quota; raise one of the two kinds (:meth:`of`)."""

    #: Could the request fit once the namespace releases GPUs?
    ever: ClassVar[bool] = False

    @staticmethod
    def of(message: str, *, ever: bool) -> QuotaExceededError:
        return QuotaBusyError(message) if ever else QuotaNeverFitsError(message)


class QuotaBusyError(QuotaExceededError):
    """The namespace holds too many GPUs now; it fits once some are released."""

    ever = True
    retryable = True


class QuotaNeverFitsError(QuotaExceededError):
    """The request is larger than the namespace's quota itself."""


class NotReadyError(SchedulerError):
    retryable = True


class DatabaseUnavailableError(SchedulerError):
    retryable = True


class DatabaseTlsError(SchedulerError):
    """The server's TLS certificate failed verification: a configuration or an attack,
    never something that waiting fixes."""


class AllocationConflictError(SchedulerError):
    retryable = True


class PodError(SchedulerError, ValueError):
    """The pod JSON does not say what we need, or says it wrongly."""


class MigrationError(SchedulerError):
    """The database schema cannot be brought up to date; a person must look."""


class TokenFileError(SchedulerError, ValueError):
    """Tokens that cannot be read or parsed; the message names where, never the token."""


class KubeApiError(SchedulerError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API {status}: {message}")
        self.status = status
