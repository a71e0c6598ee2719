"""The extender's answer for every candidate node, in columns (pure): which pass, which
cannot pass whatever happens (preemption cannot help), why the others fail, and the
0..10 priorities kube-scheduler's prioritize verb asks for."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_PRIORITY", "Verdicts"]

MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority


@dataclass(frozen=True)
class Verdicts:
    """One answer for every candidate, in columns (same order as ``names``); the
    reasons of the nodes that do not fit once :meth:`explain` wrote them."""

    names: Sequence[str]
    fits: npt.NDArray[np.bool_]
    unresolvable: npt.NDArray[np.bool_]
    min_capacity: npt.NDArray[np.float64]
    node_ids: npt.NDArray[np.intp]  # fleet node id, -1 when unknown
    _failed: dict[str, str] = field(default_factory=dict, repr=False)
    _unresolvable: dict[str, str] = field(default_factory=dict, repr=False)
    _passed: list[str] | None = field(default=None, repr=False, compare=False)

    def explain(self, nodes: npt.NDArray[np.intp], texts: list[str]) -> None:
        """The reason of each of ``nodes`` (candidate indices, ascending), written
        straight into the two answers kube-scheduler reads."""
        lost = self.unresolvable[nodes].tolist()
        for target, mask, pick in (
            (self._failed, ~self.fits & ~self.unresolvable, [not u for u in lost]),
            (self._unresolvable, self.unresolvable, lost),
        ):
            names = itertools.compress(self.names, mask.tolist())
            target.update(zip(names, itertools.compress(texts, pick), strict=True))

    @property
    def reasons(self) -> dict[str, str]:
        """Every node that does not fit, by name."""
        return self._failed | self._unresolvable

    def passed(self) -> list[str]:
        if self._passed is None:
            object.__setattr__(
                self, "_passed", list(itertools.compress(self.names, self.fits.tolist()))
            )
        return self._passed  # type: ignore[return-value]

    def failed(self) -> dict[str, str]:
        """Nodes that do not fit now, with their reasons (the caller must not change it)."""
        return self._failed

    def unresolvable_nodes(self) -> dict[str, str]:
        """Nodes that cannot fit whatever happens (preemption cannot help)."""
        return self._unresolvable

    def priorities(self, names: Sequence[str] | None = None) -> list[int]:
        """0..10 per node: its offered worst-GPU capacity against the best node's; for
        ``names`` (a subset, as prioritize sends after filter) when given."""
        cap = np.where(self.fits, self.min_capacity, 0.0)
        if names is not None and names == self.passed():  # the usual case: the survivors
            cap = cap[self.fits]
        elif names is not None:
            index = dict(zip(self.names, range(len(self.names)), strict=True))
            unknown = len(cap)  # a name the filter did not judge ranks 0: the 0 appended
            at = np.fromiter(map(index.get, names, itertools.repeat(unknown)), np.intp)
            cap = np.append(cap, 0.0)[at]
        best = float(cap.max(initial=0.0))
        if best <= 0:
            return [0] * len(cap)
        return np.rint(MAX_PRIORITY * cap / best).astype(int).tolist()  # type: ignore[no-any-return]
