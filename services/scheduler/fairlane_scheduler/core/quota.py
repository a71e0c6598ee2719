"""Namespace quotas (pure): may a namespace take these GPUs on top of what it holds?"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Quota", "QuotaVerdict", "check_quota", "models_within_quota"]

#: GPU counts are whole GPUs and fractional shares in thousandths (core/shares.py): sums
#: are rounded to that, so 0.1 + 0.2 of a GPU is 0.3 and not a hair above it.
_DECIMALS = 3


def _gpus(counts: Iterable[float]) -> float:
    return round(sum(counts), _DECIMALS)


@dataclass(frozen=True)
class Quota:
    max_gpus: int | None = None  # None: no overall limit
    max_gpus_per_model: Mapping[str, int] = field(default_factory=dict)  # catalogue key -> limit


@dataclass(frozen=True)
class QuotaVerdict:
    reason: str
    ever: bool  # False: not now, but it could fit once GPUs are released


def check_quota(
    quota: Quota, used: Mapping[str, float], wanted: Mapping[str, float]
) -> QuotaVerdict | None:
    """None when ``wanted`` (GPUs per model) fits beside ``used``; otherwise why not.

    A request larger than the limit itself can never fit (``ever`` False means 403, not 429).
    """
    used_total, wanted_total = _gpus(used.values()), _gpus(wanted.values())
    if quota.max_gpus is not None and _gpus((used_total, wanted_total)) > quota.max_gpus:
        return QuotaVerdict(
            f"quota: {wanted_total} GPUs wanted, {used_total} of {quota.max_gpus} in use",
            ever=wanted_total <= quota.max_gpus,
        )
    for model, count in sorted(wanted.items()):
        limit = quota.max_gpus_per_model.get(model)
        if limit is not None and _gpus((used.get(model, 0), count)) > limit:
            return QuotaVerdict(
                f"quota: {count} {model} wanted, {used.get(model, 0)} of {limit} in use",
                ever=count <= limit,
            )
    return None


def models_within_quota(
    quota: Quota,
    used: Mapping[str, float],
    allowed: frozenset[str] | None,
    known_models: Collection[str],
    gpus: float,
) -> frozenset[str] | QuotaVerdict | None:
    """Before choosing GPUs: the allowed models narrowed to those the namespace may still
    take ``gpus`` of (``allowed`` None: any of ``known_models``, the fleet's models), or
    why the quota refuses the request whatever GPUs are chosen."""
    used_total = _gpus(used.values())
    if quota.max_gpus is not None and _gpus((used_total, gpus)) > quota.max_gpus:
        return QuotaVerdict(
            f"quota: {gpus} GPUs wanted, {used_total} of {quota.max_gpus} in use",
            ever=gpus <= quota.max_gpus,
        )
    limits = quota.max_gpus_per_model
    limited = {m for m, limit in limits.items() if _gpus((used.get(m, 0), gpus)) > limit}
    if not limited:
        return allowed
    candidates = frozenset(known_models if allowed is None else allowed)
    remaining = candidates - limited
    if not remaining and candidates:
        blocked = sorted(candidates & limited)
        return QuotaVerdict(
            f"quota: {gpus} GPUs wanted; per-model limits reached for {', '.join(blocked)}",
            ever=any(gpus <= limits[m] for m in blocked),
        )
    return remaining
