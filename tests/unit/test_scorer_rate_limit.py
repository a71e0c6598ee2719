"""The progress records' token bucket (``fairlane_scorer.core.rate_limit``)."""

import pytest

from fairlane_scorer.core.rate_limit import Bucket, RateConfig, RateLimiter, take

CONFIG = RateConfig(rate_per_s=2.0, burst=3)
T0 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("bucket", "at_ms", "after", "admitted"),
    [
        (None, T0, Bucket(2.0, T0), True),  # no bucket is a full one
        (Bucket(0.0, T0), T0, Bucket(0.0, T0), False),  # empty: refused, nothing spent
        (Bucket(0.0, T0), T0 + 250, Bucket(0.5, T0 + 250), False),  # half a token
        (Bucket(0.0, T0), T0 + 500, Bucket(0.0, T0 + 500), True),  # one token in 0.5 s
        (Bucket(1.5, T0), T0 + 60_000, Bucket(2.0, T0 + 60_000), True),  # refilled to burst
        (Bucket(1.0, T0), T0 - 5_000, Bucket(0.0, T0), True),  # older: no refill, time kept
        (Bucket(0.5, T0), T0 - 5_000, Bucket(0.5, T0), False),
    ],
)
def test_a_record_spends_a_token_refilled_by_event_time(
    bucket: Bucket | None, at_ms: int, after: Bucket, admitted: bool
) -> None:
    assert take(bucket, at_ms, CONFIG) == (after, admitted)


def test_a_flood_is_cut_to_the_burst_then_the_rate() -> None:
    limiter = RateLimiter(CONFIG)
    flood = [limiter.admit("p1", T0 + i) for i in range(100)]  # 100 records in 0.1 s
    assert sum(flood) == 3
    later = [limiter.admit("p1", T0 + 10_000 + i * 100) for i in range(21)]  # 21 in 2 s
    assert sum(later) == 3 + 4  # the bucket refilled to its burst, then 2/s for 2 s


def test_each_placement_has_its_own_bucket() -> None:
    limiter = RateLimiter(CONFIG)
    assert sum(limiter.admit("flood", T0) for _ in range(50)) == 3
    assert [limiter.admit("honest", T0 + i * 60_000) for i in range(5)] == [True] * 5


def test_buckets_full_again_are_forgotten_and_at_most_placements_are_kept() -> None:
    limiter = RateLimiter(RateConfig(rate_per_s=1.0, burst=2, placements=10))
    for i in range(5):
        limiter.admit(f"p{i}", T0)
    assert len(limiter) == 5
    limiter.admit("late", T0 + 1_000)  # the others refilled in that second
    assert len(limiter) == 1
    for i in range(100):
        limiter.admit(f"q{i}", T0 + 1_000)
    assert len(limiter) == 10


@pytest.mark.parametrize(
    "config",
    [{"rate_per_s": 0.0}, {"rate_per_s": float("nan")}, {"burst": 0}, {"placements": 0}],
)
def test_a_config_that_admits_nothing_is_refused(config: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="required"):
        RateConfig(**config)  # type: ignore[arg-type]
