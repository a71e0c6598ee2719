"""A node speaks only for its own GPUs: the checks on a batch of node samples (pure).

Applied to each batch after decoding and before scoring
(:func:`fairlane_scorer.core.step.score_batch`), record by record in arrival order;
``newest`` is the newest accepted ``ts_ms`` of the node's row (over its GPUs), then of
its records accepted earlier in the batch:

- **replay**: a record older than ``newest - replay_tolerance_s`` is dead-lettered
  whole. One at or less than the tolerance below ``newest`` is a redelivery (Kafka
  after a crash): the per-GPU rule ignores and counts what its GPUs already hold, as
  before; a GPU of it whose own last sample is less than ``sample_min_spacing_s``
  before it is removed, so that the rate bound holds per GPU too.
- **rate** (sample time, so an agent flushing its backlog after a Kafka outage is not
  refused): a record less than ``sample_min_spacing_s`` after ``newest`` is
  dead-lettered whole. A GPU then keeps at most ``history_s / sample_min_spacing_s``
  rows whatever its agent sends.
- **quarantine**: a GPU whose uuid is bound to another node
  (:meth:`~fairlane_scorer.core.bindings.Bindings.may_speak`, with the batch's own
  accepted GPU samples as claims) is removed from the record before scoring, and the
  record dead-lettered with the uuid and the node it is bound to; the record's other
  GPUs are still scored.

A record that lost GPUs is dead-lettered once, with every reason; what is left of it
is scored.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from fairlane_events.fast_samples import AnyGpuSample, AnyNodeSample, FastNodeSample
from fairlane_scorer.core.bindings import Bindings, IdentityConfig, expired_slots, speaks_for
from fairlane_scorer.core.node_state import NodeState

__all__ = ["REASONS", "CheckedBatch", "Reason", "Refusal", "check_batch", "prunable_slots"]

Reason = Literal["replay", "rate", "quarantine"]
#: Why the identity checks dead-letter a record (the metric's labels).
REASONS: tuple[Reason, ...] = ("replay", "rate", "quarantine")


@dataclass(frozen=True)
class Refusal:
    """Record ``position`` of the checked samples is dead-lettered: whole, or with the
    GPUs the error names removed."""

    position: int
    reason: Reason
    error: str


@dataclass
class CheckedBatch:
    samples: list[AnyNodeSample] = field(default_factory=list)  # to score, in order
    refused: list[Refusal] = field(default_factory=list)
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # (uuid, node)


def _newest(row: NodeState | None) -> float:
    return float(row.last_ts_ms().max()) if row is not None and len(row) else -math.inf


def _last(row: NodeState | None, uuid: str) -> float:
    slot = None if row is None else row.slot(uuid)
    return -math.inf if row is None or slot is None else float(row.kept[slot, -1, 0])


def _out_of_order(sample: AnyNodeSample, newest: float, config: IdentityConfig) -> Refusal | None:
    """The whole record's refusal, if it is a replay or too soon after ``newest``
    (position 0: the caller's to set)."""
    ts = sample.ts_ms
    if ts < newest - config.replay_tolerance_s * 1000:
        return Refusal(
            0,
            "replay",
            f"replay: sample at {ts} ms is more than {config.replay_tolerance_s:g} s older "
            f"than node {sample.node!r}'s newest, at {newest:.0f} ms",
        )
    if newest < ts < newest + config.sample_min_spacing_s * 1000:
        return Refusal(
            0,
            "rate",
            f"rate: sample at {ts} ms is {ts - newest:.0f} ms after node {sample.node!r}'s "
            f"newest; a node's samples are at least {config.sample_min_spacing_s:g} s apart",
        )
    return None


def _with_gpus(sample: AnyNodeSample, gpus: list[AnyGpuSample]) -> AnyNodeSample:
    if isinstance(sample, FastNodeSample):
        return msgspec.structs.replace(sample, gpus=gpus)
    return sample.model_copy(update={"gpus": gpus})


@dataclass
class _Seen:
    """What the batch accepted so far: per node its newest sample, per (node, uuid) its
    last, per uuid bound to nobody in the rows the node that claimed it (over the rows'
    holders)."""

    newest: dict[str, float] = field(default_factory=dict)
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    claims: dict[str, dict[str, float]] = field(default_factory=dict)


def check_batch(
    samples: Sequence[AnyNodeSample],
    rows: Mapping[str, NodeState],
    bindings: Bindings,
    now_ms: int,
    config: IdentityConfig,
) -> CheckedBatch:
    """The records (or what is left of them) to score, and those to dead-letter.
    ``rows``: the current table rows of the batch's nodes."""
    out, seen = CheckedBatch(), _Seen()
    spacing_ms = config.sample_min_spacing_s * 1000
    for position, sample in enumerate(samples):
        node, ts = sample.node, sample.ts_ms
        row = rows.get(node)
        newest = seen.newest.get(node)
        if newest is None:
            newest = _newest(row)
        refusal = _out_of_order(sample, newest, config)
        if refusal is not None:
            out.refused.append(Refusal(position, refusal.reason, refusal.error))
            continue
        kept: list[AnyGpuSample] = []
        errors: list[str] = []
        reason: Reason = "rate"
        for gpu in sample.gpus:
            uuid = gpu.uuid
            bound = bindings.bound_node(uuid, now_ms, config, seen.claims.get(uuid))
            if not speaks_for(node, bound):
                errors.append(f"quarantine: GPU {uuid} is bound to node {bound!r}")
                out.quarantined.append((uuid, node))
                reason = "quarantine"
                continue
            if ts <= newest:  # a redelivery: its GPUs' own spacing
                last = seen.last.get((node, uuid))
                last = _last(row, uuid) if last is None else last
                if last < ts < last + spacing_ms:
                    errors.append(
                        f"rate: GPU {uuid}'s sample at {ts} ms is {ts - last:.0f} ms after its last"
                    )
                    continue
                seen.last[node, uuid] = max(last, ts)
            else:  # newer than every GPU of the node
                seen.last[node, uuid] = ts
            kept.append(gpu)
            if bound is None:  # the node binds it now: later records of the batch see it
                seen.claims[uuid] = {node: ts}
        if errors:
            out.refused.append(Refusal(position, reason, "; ".join(errors)))
        if kept:
            out.samples.append(
                sample if len(kept) == len(sample.gpus) else _with_gpus(sample, kept)
            )
            seen.newest[node] = max(newest, ts)
    return out


def prunable_slots(
    state: NodeState, reported: Collection[str], now_ms: int, config: IdentityConfig
) -> list[int]:
    """The node's expired GPUs (slots) that its batch did not report: a GPU whose
    sample was just accepted stays, however old (an agent's backlog)."""
    return [g for g in expired_slots(state, now_ms, config) if state.uuids[g] not in reported]
