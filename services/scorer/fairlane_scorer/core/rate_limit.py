"""At most so many progress records per placement, in event time (pure: a token bucket).

Every writer of ``fairlane.job-progress.v1`` can report for any live placement (a record
is checked against its placement's GPUs, not against who sent it: docs/security.md), so
one placement's records are capped before they are joined, held or learned from: a flood
reaches neither the learner nor the hold, and costs a dead letter each.

The clock is the records' own (``ts_ms``, the end of their window), never the wall
clock, so a backlog read after a restart is judged by when its records were made, not
by how fast it is read. A record stamped ahead of the scorer's clock counts as now (the
caller caps it): a writer cannot buy tokens by stamping the future. A record older than
its placement's last one refills nothing (several hosts' clocks disagree a little).

The buckets are kept in memory, per worker: a restart or a partition moving to another
worker starts its placements with a full burst. Memory is bounded: a bucket that has
filled up again is forgotten (it is the same as none), and beyond ``placements`` buckets
the least recently used goes first.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bucket", "RateConfig", "RateLimiter", "take"]


@dataclass(frozen=True)
class RateConfig:
    """``rate_per_s`` records per second of event time per placement, ``burst`` at once;
    at most ``placements`` buckets kept."""

    rate_per_s: float = 20.0
    burst: int = 2048
    placements: int = 100_000

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0 or self.burst < 1 or self.placements < 1:
            raise ValueError("rate_per_s > 0, burst >= 1 and placements >= 1 required")


@dataclass(frozen=True, slots=True)
class Bucket:
    """A placement's tokens as of ``at_ms`` (the newest record time it has seen)."""

    tokens: float
    at_ms: int


def take(bucket: Bucket | None, at_ms: int, config: RateConfig) -> tuple[Bucket, bool]:
    """One record at ``at_ms``: the bucket after it, and whether it is let through.

        tokens(t) = min(burst, tokens + rate_per_s * max(0, t - at_ms) / 1000)
        let through  <=>  tokens(t) >= 1, which then spends one

    No bucket is a full one. The bucket's time never goes back."""
    if bucket is None:
        tokens = float(config.burst)
        since_ms = at_ms
    else:
        elapsed_s = max(0, at_ms - bucket.at_ms) / 1000
        tokens = min(float(config.burst), bucket.tokens + config.rate_per_s * elapsed_s)
        since_ms = max(bucket.at_ms, at_ms)
    if tokens >= 1:
        return Bucket(tokens - 1, since_ms), True
    return Bucket(tokens, since_ms), False


def _is_full(bucket: Bucket, at_ms: int, config: RateConfig) -> bool:
    refilled = bucket.tokens + config.rate_per_s * max(0, at_ms - bucket.at_ms) / 1000
    return refilled >= config.burst


class RateLimiter:
    """The buckets of every placement one worker reads, by placement id."""

    def __init__(self, config: RateConfig) -> None:
        self.config = config
        self._buckets: dict[str, Bucket] = {}  # least recently used first
        self._clock_ms = 0  # the newest record time seen

    def __len__(self) -> int:
        return len(self._buckets)

    def admit(self, key: str, at_ms: int) -> bool:
        """Whether ``key``'s record at ``at_ms`` is within its rate (it spends a token)."""
        self._clock_ms = max(self._clock_ms, at_ms)
        bucket, admitted = take(self._buckets.pop(key, None), at_ms, self.config)
        self._buckets[key] = bucket
        self._forget()
        return admitted

    def _forget(self) -> None:
        """Drop the least recently used buckets while they are full again or too many:
        amortised O(1), as each bucket is dropped once."""
        while len(self._buckets) > 1:
            key, oldest = next(iter(self._buckets.items()))
            if len(self._buckets) <= self.config.placements and not _is_full(
                oldest, self._clock_ms, self.config
            ):
                return
            del self._buckets[key]
