from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_scheduler.core.quota import Quota, QuotaVerdict, check_quota, models_within_quota

Q = Quota(max_gpus=8, max_gpus_per_model={"H100": 4})


@pytest.mark.parametrize(
    ("used", "wanted", "ever"),
    [
        ({}, {"A100-80GB": 8}, None),  # exactly the limit fits
        ({"A100-80GB": 6}, {"A100-80GB": 3}, True),  # over, but would fit after releases
        ({}, {"A100-80GB": 9}, False),  # can never fit
        ({"H100": 3}, {"H100": 2}, True),
        ({}, {"H100": 5}, False),
        ({"H100": 4}, {"A100-80GB": 4}, None),  # the H100 limit does not bind A100s
    ],
)
def test_check_quota(used: dict[str, int], wanted: dict[str, int], ever: bool | None) -> None:
    verdict = check_quota(Q, used, wanted)
    assert (verdict is None) == (ever is None)
    if verdict is not None:
        assert verdict.ever == ever
        assert verdict.reason.startswith("quota:")


def test_models_are_narrowed_to_those_still_within_quota() -> None:
    known = ["H100", "A100-80GB", "V100"]
    assert models_within_quota(Q, {"H100": 3}, None, known, 2) == frozenset({"A100-80GB", "V100"})
    assert models_within_quota(Q, {}, None, known, 2) is None  # nothing binds: any model
    narrowed = models_within_quota(Q, {"H100": 3}, frozenset({"H100", "V100"}), known, 2)
    assert narrowed == frozenset({"V100"})


def test_quota_refusals_before_choosing() -> None:
    only_h100 = frozenset({"H100"})
    now = models_within_quota(Q, {"H100": 3}, only_h100, ["H100"], 2)
    assert isinstance(now, QuotaVerdict)
    assert now.ever
    never = models_within_quota(Q, {}, only_h100, ["H100"], 5)
    assert isinstance(never, QuotaVerdict)
    assert not never.ever
    total = models_within_quota(Q, {"V100": 7}, None, ["V100"], 2)
    assert isinstance(total, QuotaVerdict)
    assert total.ever


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 6),
    st.dictionaries(st.sampled_from(["H100", "A100-80GB"]), st.integers(0, 4)),
    st.lists(
        st.tuples(st.booleans(), st.sampled_from(["H100", "A100-80GB", "V100"]), st.integers(1, 3)),
        max_size=40,
    ),
)
def test_admitting_only_what_check_quota_allows_never_exceeds_it(
    max_gpus: int, per_model: dict[str, int], steps: list[tuple[bool, str, int]]
) -> None:
    """Any sequence of requests and releases, admitted by check_quota, stays within the
    overall and per-model limits at every step."""
    quota = Quota(max_gpus=max_gpus, max_gpus_per_model=per_model)
    held: list[tuple[str, int]] = []
    for is_release, model, count in steps:
        if is_release and held:
            held.pop(0)
            continue
        used: Counter[str] = Counter()
        for m, c in held:
            used[m] += c
        if check_quota(quota, used, {model: count}) is None:
            held.append((model, count))
        total = sum(c for _, c in held)
        assert total <= max_gpus
        for m, limit in per_model.items():
            assert sum(c for hm, c in held if hm == m) <= limit


def test_shares_count_as_their_part_of_a_gpu_without_float_noise() -> None:
    quota = Quota(max_gpus=1, max_gpus_per_model={"T4": 1})
    used = {"T4": 0.1, "A100-40GB": 0.2}  # 0.1 + 0.2 is 0.30000000000000004 in floats
    assert check_quota(quota, used, {"T4": 0.7}) is None
    assert check_quota(quota, used, {"T4": 0.701}) is not None
    assert models_within_quota(quota, {"T4": 0.3}, None, ["T4"], 0.7) is None
