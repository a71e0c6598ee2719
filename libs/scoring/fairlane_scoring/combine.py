"""From component scores to instant scores: renormalised family means (vectorised)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from fairlane_scoring.components import Components
from fairlane_scoring.config import COMPONENTS, HEALTH_COMPONENTS, LOAD_COMPONENTS

__all__ = ["component_matrix", "family_mean", "instant_scores"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_HEALTH = [COMPONENTS.index(c) for c in HEALTH_COMPONENTS]
_LOAD = [COMPONENTS.index(c) for c in LOAD_COMPONENTS]


def component_matrix(rows: Sequence[Components]) -> FloatArray:
    """Samples x components, NaN where a component is absent."""
    return np.array(
        [[np.nan if c is None else c for c in row] for row in rows], dtype=np.float64
    ).reshape(len(rows), len(COMPONENTS))


def family_mean(values: FloatArray, weights: FloatArray) -> FloatArray:
    """Per row: sum(w_i c_i) / sum(w_i) over the present (non-NaN) components; NaN when
    nothing with a positive weight is present (renormalisation over what is reported)."""
    present = ~np.isnan(values)
    w = np.where(present, weights, 0.0)
    total = w.sum(axis=1)
    weighted = np.where(present, values, 0.0) @ weights
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.nan)


def instant_scores(
    components: FloatArray, load_counted: BoolArray, weights: Mapping[str, float]
) -> FloatArray:
    """instant = H x L per sample, where

        H = family_mean(clock, thermal)                        (health: how fast it runs)
        L = family_mean(compute, memory, bandwidth, power)     (load: how much is free)

    A family with nothing present, or the load family of a sample whose load is masked
    (``load_counted`` False), is left out of the product; a sample with neither family
    scores 0: no evidence is not good evidence. The health gate is applied to the decayed
    score, not here (``fairlane_scoring.reference.summarise``).
    """
    w = np.array([weights[c] for c in COMPONENTS], dtype=np.float64)
    health = family_mean(components[:, _HEALTH], w[_HEALTH])
    load = family_mean(components[:, _LOAD], w[_LOAD])
    load = np.where(load_counted, load, np.nan)
    none = np.isnan(health) & np.isnan(load)
    product = np.nan_to_num(health, nan=1.0) * np.nan_to_num(load, nan=1.0)
    return np.where(none, 0.0, product)
