"""Which node speaks for each GPU uuid, within one worker (pure).

A GPU uuid is *bound* to one node: the node whose table row holds it with the newest
last sample that has not expired (:func:`expires_before_ms`), unless an operator pinned
it to a node (the pinned-bindings file), which wins. A node may speak for a uuid bound
to it or to nobody (:meth:`Bindings.may_speak`): the samples agent quarantines the
others' samples of it, and the staleness timer neither announces nor tombstones a slot
of a uuid that another node holds now.

:class:`Bindings` is an index of the worker's ``node-windows`` rows (uuid -> the nodes
whose rows hold it, and each one's last sample time), kept beside the table: the agent
indexes every row it writes, and the whole table again after each recovery. It holds
no more than the table does. Rows of other workers are not in it: bindings are exact
within a worker only (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fairlane_scorer.core.node_state import NodeState

__all__ = [
    "Bindings",
    "IdentityConfig",
    "Quarantined",
    "expired_slots",
    "expires_before_ms",
    "future_after_ms",
    "live_uuids",
    "speaks_for",
]


@dataclass(frozen=True)
class IdentityConfig:
    """The scorer's checks of who speaks for which GPU (docs/scoring.md, "A node speaks
    only for its own GPUs"), all in seconds of sample time but the expiry and the future
    bound (wall clock)."""

    #: Below its node's newest accepted sample, a record within this is a redelivery
    #: (ignored per GPU, counted as a duplicate); older, a replay (dead-lettered). Kafka
    #: redelivers after a crash what was processed since the last commit: 10 intervals
    #: of 30 s, 60 of the demo's 5 s.
    replay_tolerance_s: float = 300.0
    #: A node's records closer than this to its newest are dead-lettered: a GPU keeps
    #: at most history_s / this rows, whatever its agent sends.
    sample_min_spacing_s: float = 1.0
    #: A (node, GPU) without a sample for this long (wall clock) is forgotten: its uuid
    #: is bound to nobody, tombstoned on the scores topic, and pruned from the row.
    gpu_expire_after_s: float = 1800.0
    #: A record stamped more than this ahead of the scorer's clock is dead-lettered: a
    #: sample from the future would hold its uuids past the expiry and make its node's
    #: honest samples look like replays. NTP keeps clocks within milliseconds; this is
    #: for a node whose clock has gone wrong, not for a healthy one.
    max_future_skew_s: float = 120.0
    #: A node holds at most this many live (unexpired) GPUs: one more in a record is
    #: removed from it. The node-sample schema's limit of GPUs in one record.
    max_gpus_per_node: int = 64

    def __post_init__(self) -> None:
        if self.replay_tolerance_s < 0 or self.sample_min_spacing_s < 0:
            raise ValueError("replay_tolerance_s and sample_min_spacing_s must be >= 0")
        if not self.gpu_expire_after_s > 0 or not self.max_future_skew_s > 0:
            raise ValueError("gpu_expire_after_s and max_future_skew_s must be > 0")
        if self.max_gpus_per_node < 1:
            raise ValueError("max_gpus_per_node must be >= 1")


def expires_before_ms(now_ms: int, config: IdentityConfig) -> float:
    """A slot whose last sample is older than this has expired at ``now_ms``:
    ``now_ms - gpu_expire_after_s * 1000``."""
    return now_ms - config.gpu_expire_after_s * 1000


def future_after_ms(now_ms: int, config: IdentityConfig) -> float:
    """A sample stamped after this is from the future at ``now_ms``:
    ``now_ms + max_future_skew_s * 1000``."""
    return now_ms + config.max_future_skew_s * 1000


def live_uuids(state: NodeState, now_ms: int, config: IdentityConfig) -> set[str]:
    """The node's GPUs that have not expired at ``now_ms`` (what counts towards
    ``max_gpus_per_node``): those whose last sample is at or after
    :func:`expires_before_ms`."""
    after = expires_before_ms(now_ms, config)
    last = state.last_ts_ms().tolist()  # a list: numpy costs more than it saves on 8 GPUs
    if not last or min(last) >= after:  # all live (the usual row)
        return set(state.uuids)
    return {u for u, ts in zip(state.uuids, last, strict=True) if ts >= after}


def expired_slots(state: NodeState, now_ms: int, config: IdentityConfig) -> list[int]:
    """The node's GPUs (slots) that have expired at ``now_ms``."""
    late = state.last_ts_ms() < expires_before_ms(now_ms, config)
    return np.flatnonzero(late).tolist()  # type: ignore[no-any-return]


def speaks_for(node: str, bound: str | None) -> bool:
    """Whether ``node`` may speak for a uuid ``bound`` to that node (None: nobody)."""
    return bound is None or bound == node


class Bindings:
    """uuid -> the nodes whose rows hold it, with each one's last sample (ms); and the
    operator's pins (uuid -> node), which win over them."""

    def __init__(self) -> None:
        self._holders: dict[str, dict[str, float]] = {}
        self._held: dict[str, tuple[str, ...]] = {}  # node -> the uuids its row holds
        self.pins: Mapping[str, str] = {}

    def __len__(self) -> int:
        """Uuids some row holds."""
        return len(self._holders)

    def clear(self) -> None:
        self._holders.clear()
        self._held.clear()

    def index(self, state: NodeState) -> None:
        """``state`` is its node's row now (replacing what the node's row held)."""
        node = state.node
        if self._held.get(node) != state.uuids:
            for uuid in self._held.pop(node, ()):
                holders = self._holders[uuid]
                del holders[node]
                if not holders:
                    del self._holders[uuid]
            self._held[node] = state.uuids
        for uuid, ts in zip(state.uuids, state.last_ts_ms().tolist(), strict=True):
            self._holders.setdefault(uuid, {})[node] = ts

    def bound_node(
        self,
        uuid: str,
        now_ms: int,
        config: IdentityConfig,
        claims: Mapping[str, float] | None = None,
    ) -> str | None:
        """The node ``uuid`` is bound to at ``now_ms`` (None: nobody): its pin, else the
        holder with the newest last sample that has not expired (then the first name);
        ``claims``: node -> last sample of the batch being checked, over the rows'."""
        pinned = self.pins.get(uuid)
        if pinned is not None:
            return pinned
        holders: Mapping[str, float] | None = self._holders.get(uuid)
        if claims:
            holders = {**holders, **claims} if holders else claims
        if not holders:
            return None
        after = expires_before_ms(now_ms, config)
        live = [(-ts, node) for node, ts in holders.items() if ts >= after]
        return min(live)[1] if live else None

    def may_speak(
        self,
        node: str,
        uuid: str,
        now_ms: int,
        config: IdentityConfig,
        claims: Mapping[str, float] | None = None,
    ) -> bool:
        """Whether ``node`` may speak for ``uuid``: it is bound to ``node`` or nobody."""
        return speaks_for(node, self.bound_node(uuid, now_ms, config, claims))


class Quarantined:
    """The uuids whose samples from a node they are not bound to were quarantined within
    the last ``gpu_expire_after_s`` (a gauge's worth: uuid -> the claiming node, when)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def note(self, uuid: str, node: str, now_ms: int) -> None:
        self._seen[uuid] = (node, now_ms)

    def prune(self, now_ms: int, config: IdentityConfig, pins: Mapping[str, str]) -> None:
        """Forget claims older than the expiry, and those an operator's pin settled in
        the claimer's favour."""
        after = expires_before_ms(now_ms, config)
        self._seen = {
            uuid: (node, at_ms)
            for uuid, (node, at_ms) in self._seen.items()
            if at_ms >= after and pins.get(uuid) != node
        }
