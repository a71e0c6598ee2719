"""A node speaks only for its own GPUs: the checks on a batch of node samples (pure).

Applied to each batch after decoding and before scoring
(:func:`fairlane_scorer.core.step.score_batch`), record by record in arrival order;
``newest`` is the newest accepted ``ts_ms`` of the node's row (over its GPUs), then of
its records accepted earlier in the batch:

- **future**: a record stamped more than ``max_future_skew_s`` ahead of ``now_ms``
  (:func:`~fairlane_scorer.core.bindings.future_after_ms`) is dead-lettered whole,
  before anything else reads it: it would hold its uuids past their expiry and make
  its node's later samples look like replays.
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
- **gpu_cap**: a GPU that is not one of its node's live GPUs
  (:func:`~fairlane_scorer.core.bindings.live_uuids`: unexpired slots of its row, and
  the GPUs the batch accepted for it so far) while the node already holds
  ``max_gpus_per_node`` is removed from the record, which is dead-lettered; the node's
  live GPUs are still scored. A row then holds at most that many slots once pruned.

A record that lost GPUs is dead-lettered once, with every reason, and counted under
the gravest (quarantine, then gpu_cap, then rate); what is left of it is scored.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from fairlane_events.fast_samples import AnyGpuSample, AnyNodeSample, FastNodeSample
from fairlane_scorer.core.bindings import (
    Bindings,
    IdentityConfig,
    expired_slots,
    future_after_ms,
    live_uuids,
    speaks_for,
)
from fairlane_scorer.core.node_state import NodeState

__all__ = ["REASONS", "CheckedBatch", "Reason", "Refusal", "check_batch", "prunable_slots"]

Reason = Literal["future", "replay", "rate", "gpu_cap", "quarantine"]
#: Why the identity checks dead-letter a record (the metric's labels).
REASONS: tuple[Reason, ...] = ("future", "replay", "rate", "gpu_cap", "quarantine")


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
    # max of a list: numpy's reduction costs more than it saves on a row's few GPUs
    return max(row.last_ts_ms().tolist()) if row is not None and len(row) else -math.inf


def _last(row: NodeState | None, uuid: str) -> float:
    slot = None if row is None else row.slot(uuid)
    return -math.inf if row is None or slot is None else float(row.kept[slot, -1, 0])


def _from_the_future(sample: AnyNodeSample, now_ms: int, config: IdentityConfig) -> Refusal:
    """The whole record's refusal: it is stamped after
    :func:`~fairlane_scorer.core.bindings.future_after_ms` (position 0: the caller's)."""
    return Refusal(
        0,
        "future",
        f"future: sample at {sample.ts_ms} ms is {(sample.ts_ms - now_ms) / 1000:.0f} s ahead "
        f"of the scorer's clock ({now_ms} ms); at most {config.max_future_skew_s:g} s",
    )


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


def _past_the_cap(live: set[str], uuid: str, node: str, cap: int) -> str | None:
    """The error if ``uuid`` would be one more than ``cap`` GPUs ``live`` on ``node``;
    else None, and ``live`` holds it."""
    if uuid in live:
        return None
    if len(live) >= cap:
        return (
            f"gpu_cap: GPU {uuid} would be one more than node {node!r}'s {len(live)} live "
            f"GPUs; at most {cap}"
        )
    live.add(uuid)
    return None


@dataclass
class _Seen:
    """What the batch accepted so far: per node its newest sample, per (node, uuid) its
    last, per uuid bound to nobody in the rows the node that claimed it (over the rows'
    holders), per node the GPUs it holds live (its row's, read at its first record)."""

    newest: dict[str, float] = field(default_factory=dict)
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    claims: dict[str, dict[str, float]] = field(default_factory=dict)
    live: dict[str, set[str]] = field(default_factory=dict)


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
    spacing_ms, cap = config.sample_min_spacing_s * 1000, config.max_gpus_per_node
    future_ms = future_after_ms(now_ms, config)
    for position, sample in enumerate(samples):
        node, ts = sample.node, sample.ts_ms
        row = rows.get(node)
        newest = seen.newest.get(node)
        if newest is None:
            newest = _newest(row)
        refusal = (
            _from_the_future(sample, now_ms, config)
            if ts > future_ms
            else _out_of_order(sample, newest, config)
        )
        if refusal is not None:
            out.refused.append(Refusal(position, refusal.reason, refusal.error))
            continue
        live = seen.live.get(node)
        if live is None:
            live = seen.live[node] = set() if row is None else live_uuids(row, now_ms, config)
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
            last: float = ts  # newer than every GPU of the node
            if ts <= newest:  # a redelivery: its GPUs' own spacing
                cached = seen.last.get((node, uuid))
                last = _last(row, uuid) if cached is None else cached
                if last < ts < last + spacing_ms:
                    errors.append(
                        f"rate: GPU {uuid}'s sample at {ts} ms is {ts - last:.0f} ms after its last"
                    )
                    continue
            over = _past_the_cap(live, uuid, node, cap)
            if over is not None:
                errors.append(over)
                reason = "quarantine" if reason == "quarantine" else "gpu_cap"
                continue
            seen.last[node, uuid] = max(last, ts)
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
