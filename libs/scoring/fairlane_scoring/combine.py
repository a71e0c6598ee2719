"""From component scores to an instant score: renormalised family means."""

from __future__ import annotations

from collections.abc import Sequence

from fairlane_scoring.components import Components
from fairlane_scoring.config import COMPONENTS, HEALTH_COMPONENTS

__all__ = ["family_mean", "instant_score"]

#: COMPONENTS lists the health family first, then the load family.
_SPLIT = len(HEALTH_COMPONENTS)
assert COMPONENTS[:_SPLIT] == HEALTH_COMPONENTS


def family_mean(values: Sequence[float | None], weights: Sequence[float]) -> float | None:
    """sum(w_i c_i) / sum(w_i) over the present (not None) components; None when nothing
    with a positive weight is present (renormalisation over what is reported)."""
    total = weighted = 0.0
    for value, weight in zip(values, weights, strict=True):
        if value is not None:
            total += weight
            weighted += weight * value
    return weighted / total if total > 0 else None


def instant_score(components: Components, load_counted: bool, weights: Sequence[float]) -> float:
    """instant = H x L, where (``weights`` in COMPONENTS order)

        H = family_mean(clock, thermal)                        (health: how fast it runs)
        L = family_mean(compute, memory, bandwidth, power)     (load: how much is free)

    A family with nothing present, or the load family of a sample whose load is masked
    (``load_counted`` False), is left out of the product; a sample with neither family
    scores 0: no evidence is not good evidence. The health gate is applied to the decayed
    score, not here (``fairlane_scoring.reference.score_kept``).
    """
    health = family_mean(components[:_SPLIT], weights[:_SPLIT])
    load = family_mean(components[_SPLIT:], weights[_SPLIT:]) if load_counted else None
    if health is None and load is None:
        return 0.0
    return (1.0 if health is None else health) * (1.0 if load is None else load)
