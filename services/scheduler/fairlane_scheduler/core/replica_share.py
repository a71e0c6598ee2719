"""Each scheduler replica's own share of the nodes (pure).

Replicas decide on views of their own and learn of each other's commits late (once a
second, or when Postgres refuses a write). With one deterministic ranking they all take
the same node and GPUs among nodes the packing ranks equal, and all but one of their
writes are refused and retried. So every node belongs to one replica's share, by a
stable hash of its name (CRC-32: the same in every process, unlike Python's salted
``hash``; no coordination, and a node keeps its share as others come and go), and the
ranking prefers this replica's share among nodes the packing ranks equal
(core/placement.py ``packing_keys``): replicas meet only once a share runs out.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ALONE", "ReplicaShare"]


@dataclass(frozen=True)
class ReplicaShare:
    """Replica ``index`` of ``replicas``; one replica (the default) has every node."""

    replicas: int = 1
    index: int = 0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, not {self.replicas}")
        if not 0 <= self.index < self.replicas:
            raise ValueError(
                f"replica index {self.index} is not one of 0..{self.replicas - 1} "
                f"({self.replicas} replica(s))"
            )

    @property
    def alone(self) -> bool:
        return self.replicas == 1

    def others(self, names: Sequence[str]) -> npt.NDArray[np.float64]:
        """Per node name: 1.0 where the node is another replica's share, else 0.0."""
        owner = np.fromiter(
            (zlib.crc32(name.encode()) % self.replicas for name in names), np.int64, len(names)
        )
        others: npt.NDArray[np.float64] = (owner != self.index).astype(np.float64)
        return others


#: One replica: every node is its own (the default).
ALONE = ReplicaShare()
