"""The head of a lexicographic sort without sorting everything (pure numpy): a
decision wants the best one to eight nodes of up to 12,500, and ``np.lexsort`` of all of
them on three keys took ~1 ms, more than the rest of the decision."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["smallest_by"]


def smallest_by(keys: Sequence[npt.NDArray[Any]], count: int) -> npt.NDArray[np.intp]:
    """The positions of the ``count`` smallest entries by ``keys`` (the first the most
    significant), in order: ``np.lexsort(keys[::-1])[:count]`` without sorting them all.
    Each key narrows the field with a partition (O(n)): what lies below the
    ``count``-th value is in and is sorted (fewer than ``count``), its ties go on to the
    next key; entries equal in every key keep their order, as in a stable sort."""
    field = np.arange(len(keys[0]))
    parts = []
    for level, key in enumerate(keys):
        if count == 0:
            break
        if len(field) <= count:
            below, field, count = field, field[:0], 0
        else:
            values = key[field]
            cut = np.partition(values, count - 1)[count - 1]
            below, field = field[values < cut], field[values == cut]
            count -= len(below)
        parts.append(below[np.lexsort([k[below] for k in reversed(keys[level:])])])
    parts.append(field[:count])
    return np.concatenate(parts)
