"""dcgm-exporter scrapes → node samples: one record per node per round (pure, no I/O).

One bridge covers many exporters (one per node, usually). It remembers, per exporter,
which GPUs each node has shown, because an exporter that answers *without* a GPU is news
— the GPU fell off the bus, or DCGM lost it — while an exporter that does not answer says
nothing about its GPUs. So:

- a GPU missing from an answered scrape is reported ``healthy=False`` (no metrics) until
  it is back, like the NVML agent's lost GPU; a node whose GPUs are all missing is still
  reported, every GPU unhealthy;
- an exporter that is down (the caller does not call :meth:`DcgmBridge.node_samples`)
  gets no records: its GPUs go stale in the scorer after ``stale_after``, which is the
  honest answer to "we do not know".

A value outside the record's range (a broken sensor reading 900 °C, say) is reported as
null, and named once, rather than losing the node's record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fairlane_agent.core.dcgm_exposition import DcgmGpu
from fairlane_events.records import GpuSample, NodeSample

__all__ = ["BridgeRound", "DcgmBridge", "gpu_sample"]


@dataclass(frozen=True)
class BridgeRound:
    """What one exporter's scrape became, and what changed since its last one."""

    records: list[NodeSample]
    vanished: list[tuple[str, str]] = field(default_factory=list)  # (node, uuid), new
    returned: list[tuple[str, str]] = field(default_factory=list)  # (node, uuid), back
    problems: list[str] = field(default_factory=list)  # each said once per bridge
    dropped_fields: list[str] = field(default_factory=list)  # every null-ed value, to count


@dataclass(frozen=True)
class _Known:
    index: int
    model: str


def gpu_sample(gpu: DcgmGpu) -> tuple[GpuSample | None, list[str]]:
    """The record's GPU entry and the fields dropped as out of range; None if the GPU's
    identity itself does not fit the contract (its uuid or model too long, say)."""
    fields: dict[str, Any] = dict(gpu.metrics)
    dropped: list[str] = []
    used, total = fields.get("mem_used_bytes"), fields.get("mem_total_bytes")
    if used is not None and total is not None and used > total:
        dropped += ["mem_used_bytes", "mem_total_bytes"]
    base = {"uuid": gpu.uuid, "index": gpu.index, "model": gpu.model}
    base["healthy"] = gpu.unhealthy_because is None
    try:
        return GpuSample(**base, **_without(fields, dropped)), dropped
    except ValidationError as exc:
        bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"] and e["loc"][0] in fields}
        dropped += sorted(bad - set(dropped))
    try:
        return GpuSample(**base, **_without(fields, dropped)), dropped
    except ValidationError:
        return None, dropped


def _without(fields: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in names}


class DcgmBridge:
    """Turns each exporter's scrape into node samples; holds what each node has shown."""

    def __init__(self) -> None:
        # exporter -> node -> uuid -> identity; exporter -> node -> driver version
        self._known: dict[str, dict[str, dict[str, _Known]]] = defaultdict(dict)
        self._drivers: dict[str, dict[str, str]] = defaultdict(dict)
        self._missing: set[tuple[str, str, str]] = set()  # (exporter, node, uuid)
        self._said: set[str] = set()

    def node_samples(self, exporter: str, gpus: Sequence[DcgmGpu], ts_ms: int) -> BridgeRound:
        """The records for one answered scrape of ``exporter`` at ``ts_ms``."""
        known, drivers = self._known[exporter], self._drivers[exporter]
        present: dict[str, dict[str, DcgmGpu]] = defaultdict(dict)
        for gpu in gpus:
            present[gpu.node][gpu.uuid] = gpu
            known.setdefault(gpu.node, {})[gpu.uuid] = _Known(gpu.index, gpu.model)
            if gpu.driver_version:
                drivers[gpu.node] = gpu.driver_version
        out = BridgeRound(records=[])
        for node, node_gpus in known.items():
            entries = [
                self._entry((exporter, node, uuid), ident, present[node].get(uuid), out)
                for uuid, ident in node_gpus.items()
            ]
            self._record(node, ts_ms, drivers.get(node), entries, out)
        return out

    def _entry(
        self, key: tuple[str, str, str], ident: _Known, gpu: DcgmGpu | None, out: BridgeRound
    ) -> GpuSample | None:
        """One GPU's entry in its node's record; ``key`` is (exporter, node, uuid)."""
        _, node, uuid = key
        if gpu is None:
            if key not in self._missing:
                self._missing.add(key)
                out.vanished.append((node, uuid))
            return GpuSample(uuid=uuid, index=ident.index, model=ident.model, healthy=False)
        if key in self._missing:
            self._missing.discard(key)
            out.returned.append((node, uuid))
        sample, dropped = gpu_sample(gpu)
        out.dropped_fields.extend(dropped)
        if dropped:
            self._say(
                out,
                f"node {node} GPU {uuid}: {', '.join(dropped)} outside the record's "
                "range, reported as null",
            )
        if sample is None:
            self._say(out, f"node {node} GPU {uuid}: identity does not fit the record; left out")
        elif gpu.unhealthy_because:
            self._say(out, f"node {node} GPU {uuid}: {gpu.unhealthy_because}; reported unhealthy")
        return sample

    def _record(
        self,
        node: str,
        ts_ms: int,
        driver: str | None,
        entries: list[GpuSample | None],
        out: BridgeRound,
    ) -> None:
        gpus = sorted((g for g in entries if g is not None), key=lambda g: (g.index, g.uuid))
        try:
            out.records.append(
                NodeSample(
                    schema_="node-sample/1",
                    node=node,
                    ts_ms=ts_ms,
                    source="dcgm",
                    driver_version=driver,
                    gpus=gpus,
                )
            )
        except ValidationError as exc:
            reason = "; ".join(e["msg"] for e in exc.errors())
            self._say(out, f"node {node!r}: no record ({reason})")

    def _say(self, out: BridgeRound, problem: str) -> None:
        if problem not in self._said:
            self._said.add(problem)
            out.problems.append(problem)
