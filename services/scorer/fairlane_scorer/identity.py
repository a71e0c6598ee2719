"""The worker's side of "a node speaks only for its own GPUs" (docs/security.md).

:class:`NodeIdentity` holds what the pure checks (:mod:`fairlane_scorer.core.node_identity`,
:mod:`fairlane_scorer.core.bindings`) need across batches: the bindings index of the
worker's rows, the quarantined uuids, the expired slots already tombstoned, and the
operator's pinned bindings (:func:`pinned_bindings`, a file re-read when it changes).
It counts what the checks refuse; :class:`~fairlane_scorer.agents.ScoringAgents` does
the dead-lettering and the tombstones.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from fairlane_events.fast_samples import AnyNodeSample
from fairlane_runtime.reloaded_file import ReloadedFile
from fairlane_scorer.core.bindings import (
    Bindings,
    IdentityConfig,
    Quarantined,
    expired_slots,
    expires_before_ms,
)
from fairlane_scorer.core.node_identity import CheckedBatch, check_batch, prunable_slots
from fairlane_scorer.core.node_state import NodeState, keep_slots
from fairlane_scorer.metrics import ScorerMetrics

__all__ = ["NodeIdentity", "parse_pins", "pinned_bindings"]


def parse_pins(text: str, where: str = "pinned bindings") -> dict[str, str]:
    """A pinned-bindings file: one JSON object of GPU uuid -> node name (ValueError
    naming ``where`` otherwise)."""
    try:
        pins = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(pins, dict) or not all(
        isinstance(node, str) and node for node in pins.values()
    ):
        raise ValueError(f"{where}: not a JSON object of GPU uuid -> node name")
    return pins


def pinned_bindings(path: Path) -> ReloadedFile[Mapping[str, str]]:
    """The operator's re-bindings (uuid -> node), which win over the first reporter,
    from a file re-read when it changes (none until it parses)."""
    return ReloadedFile(path, parse_pins, {}, "pinned bindings")


@dataclass
class NodeIdentity:
    config: IdentityConfig
    metrics: ScorerMetrics
    pinned: ReloadedFile[Mapping[str, str]] | None = None
    bindings: Bindings = field(default_factory=Bindings)
    quarantined: Quarantined = field(default_factory=Quarantined)
    #: Expired (node, uuid) slots tombstoned already, while they stay in their row; lost
    #: on restart: tombstoned once more (harmless), never announced stale.
    tombstoned: set[tuple[str, str]] = field(default_factory=set)

    def check(
        self, samples: Sequence[AnyNodeSample], rows: Mapping[str, NodeState], now_ms: int
    ) -> CheckedBatch:
        """:func:`~fairlane_scorer.core.node_identity.check_batch`, counted."""
        checked = check_batch(samples, rows, self.bindings, now_ms, self.config)
        for refusal in checked.refused:
            self.metrics.refused.labels(refusal.reason).inc()
        for uuid, node in checked.quarantined:
            self.quarantined.note(uuid, node, now_ms)
        if checked.quarantined:
            self.metrics.gpu_samples_quarantined.inc(len(checked.quarantined))
            self.metrics.quarantined_gpus.set(len(self.quarantined))
        return checked

    def reindex(self, rows: Iterable[NodeState]) -> None:
        """The table's rows, all of them (after a recovery)."""
        self.bindings.clear()
        for row in rows:
            self.bindings.index(row)

    def prune(
        self, row: NodeState, reported: Collection[str], now_ms: int
    ) -> tuple[NodeState, list[str]]:
        """The row without its expired GPUs that its batch did not report, and theirs."""
        gone = prunable_slots(row, reported, now_ms, self.config)
        if not gone:
            return row, []
        dropped = set(gone)
        kept = [g for g in range(len(row)) if g not in dropped]
        return keep_slots(row, kept), [row.uuids[g] for g in gone]

    def expired(self, row: NodeState, now_ms: int) -> set[str]:
        return {row.uuids[g] for g in expired_slots(row, now_ms, self.config)}

    def may_speak(self, node: str, uuid: str, now_ms: int) -> bool:
        return self.bindings.may_speak(node, uuid, now_ms, self.config)

    def forgettable(self, row: NodeState | None, uuid: str, now_ms: int) -> bool:
        """Whether the slot of ``uuid`` in ``row`` (its node's row now) may be
        tombstoned: it has expired and no other node holds the uuid now."""
        slot = None if row is None else row.slot(uuid)
        return (
            row is not None
            and slot is not None
            and row.last_ts_ms()[slot] < expires_before_ms(now_ms, self.config)
            and self.may_speak(row.node, uuid, now_ms)
        )

    def refresh(self, now_ms: int) -> None:
        """From the staleness timer: the pins file re-read if it changed, the quarantine
        gauge brought up to date."""
        if self.pinned is not None:
            self.bindings.pins = self.pinned.current()
        self.quarantined.prune(now_ms, self.config, self.bindings.pins)
        self.metrics.quarantined_gpus.set(len(self.quarantined))
