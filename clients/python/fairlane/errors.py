"""The client's one exception tree.

    ClientError                      (root of everything the client raises)
     +-- UnreachableError            no answer: connection refused, timeout; retryable
     +-- ApiError                    the scheduler answered an error (status, code, detail);
                                     retryable for 429 and 503 (it sends Retry-After)

``retryable`` tells a caller whether waiting and trying again can help.
"""

from __future__ import annotations

__all__ = ["ApiError", "ClientError", "UnreachableError"]


class ClientError(Exception):
    """Root of the client's errors."""

    retryable = False


class UnreachableError(ClientError):
    """The scheduler did not answer at all (refused, reset, timed out)."""

    retryable = True


class ApiError(ClientError):
    """An error answer: the HTTP status, the scheduler's stable ``code`` and its sentence."""

    def __init__(
        self, status: int, code: str, detail: str, rejections: dict[str, int] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.rejections = rejections

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self.status in (429, 503)
