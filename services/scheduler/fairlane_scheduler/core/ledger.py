"""What live placements hold, in memory (pure): their GPUs, their MASTER_PORT on the
master node, and each namespace's GPUs per model, so that a decision reads no table.

Two kinds of entries: *committed* (live in Postgres) and *reserved* (decided here, their
write in flight). A reservation is taken in the same step as the decision, so concurrent
requests in one process never choose the same GPUs or port. Postgres stays the arbiter:
this view only makes conflicts rare, its constraints make them harmless.

Kept exact from two sources: this replica's own committed changes (:meth:`commit`,
:meth:`release`, from each transaction's result) and snapshots of the committed rows
(:meth:`replace`), which bring other replicas' changes. A snapshot read while own changes
were committing could miss them; those are journaled with a sequence number and
re-applied over any snapshot that started before them.

A snapshot is the ids of the live placements and the holdings of those this ledger did
not know (:meth:`unknown`): what a committed placement holds never changes, so a full
cluster's snapshot (12,500 live placements at 100k GPUs) reads ids, not GPUs, and
indexes only what started or ended since the last one. Rebuilding every index from the
whole snapshot cost ~90 ms of CPU there, each second (docs/benchmarks-history.md).

Fractional placements (issue 29) hold a share of one GPU: the ledger keeps each shared
GPU's tenants (:meth:`shares`), and marks it held in the fleet view while it has any, so
whole-GPU decisions never take it; quota usage counts a share as its part of a GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.core.shares import SHARE_SCALE, GpuUse, share_milli

__all__ = ["HeldMask", "Holding", "Ledger"]


class HeldMask(Protocol):
    """Told which GPUs are held (the fleet view's ``held`` column)."""

    def hold(self, uuid: str, *, held: bool = True) -> None: ...


#: ``_gpus``' value for a GPU fractional placements share (their ids are in ``_shared``).
_SHARED = ""


class _NoMask:
    def hold(self, uuid: str, *, held: bool = True) -> None:
        pass


@dataclass(frozen=True)
class Holding:
    """What one live (or reserved) placement holds."""

    placement_id: str
    namespace: str
    master: str
    port: int
    gpus: tuple[str, ...]
    models: tuple[str, ...]  # catalogue key of each GPU, in the order of ``gpus``
    #: A fractional placement's share of its one GPU and that share's memory; None:
    #: whole GPUs.
    share: GpuUse | None = None

    @classmethod
    def of(cls, placement: Placement) -> Holding:
        slots = [g for n in placement.nodes for g in n.gpus]
        gpus = tuple(g.uuid for g in slots)
        master = placement.nodes[0]
        share = None
        if slots and slots[0].share is not None:
            share = GpuUse(share_milli(slots[0].share), slots[0].memory_mib or 0, 1)
        return cls(
            placement.id,
            placement.namespace,
            master.master_addr,
            master.master_port,
            gpus,
            tuple(placement.gpu_models.get(g, "") for g in gpus),
            share,
        )

    @property
    def milli_per_gpu(self) -> int:
        return SHARE_SCALE if self.share is None else self.share.milli


class Ledger:
    def __init__(self, mask: HeldMask | None = None) -> None:
        self._mask: HeldMask = _NoMask() if mask is None else mask  # a FleetView may be empty
        self._committed: dict[str, Holding] = {}
        self._reserved: dict[str, Holding] = {}
        self._gpus: dict[str, str] = {}  # uuid -> placement id, committed and reserved
        self._shared: dict[str, dict[str, GpuUse]] = {}  # uuid -> its tenants' shares
        self._ports: dict[str, Counter[int]] = {}  # master node -> holdings per port there
        self._usage: dict[str, Counter[str]] = {}  # namespace -> GPUs per model, in 1/1000
        self._journal: list[tuple[int, Holding, bool]] = []  # (seq, holding, live after)
        self.seq = 0  # own committed changes so far
        self._since = -1  # the newest snapshot taken so far began after own change

    @property
    def gpus(self) -> Collection[str]:
        """GPUs held or reserved, whole or shared (a live view, not a copy)."""
        return self._gpus.keys()

    @property
    def shared_gpus(self) -> Collection[str]:
        """GPUs fractional placements hold or reserve (a live view)."""
        return self._shared.keys()

    def shares(self, uuid: str) -> GpuUse:
        """What the fractional placements on ``uuid`` hold together (none: nothing)."""
        tenants = self._shared.get(uuid)
        if not tenants:
            return GpuUse(0, 0, 0)
        uses = tenants.values()
        return GpuUse(sum(u.milli for u in uses), sum(u.memory_mib for u in uses), len(tenants))

    def ports(self, node: str) -> Collection[int]:
        return self._ports.get(node, {}).keys()

    def usage(self, namespace: str) -> Mapping[str, float]:
        """GPUs per model the namespace holds or has reserved (a share: its part)."""
        milli = self._usage.get(namespace)
        return {} if not milli else {m: n / SHARE_SCALE for m, n in milli.items()}

    def holds(self, placement_id: str) -> bool:
        return placement_id in self._committed

    def __len__(self) -> int:
        return len(self._committed)

    def reserve(self, holding: Holding) -> None:
        self._reserved[holding.placement_id] = holding
        self._index(holding)

    def unreserve(self, placement_id: str) -> None:
        holding = self._reserved.pop(placement_id, None)
        if holding is not None:
            self._unindex(holding)

    def commit(self, holding: Holding) -> None:
        """``holding`` is live in Postgres now (it may differ from its reservation: the
        database may have given it another port). A reservation it equals is taken over
        as it stands: its GPUs, port and usage are counted already."""
        reserved = self._reserved.pop(holding.placement_id, None)
        if reserved == holding and holding.placement_id not in self._committed:
            self._committed[holding.placement_id] = holding
        else:
            if reserved is not None:
                self._unindex(reserved)
            self._apply(holding, live=True)
        self._log(holding, live=True)

    def release(self, placement_id: str) -> None:
        """The placement ended in Postgres (by this replica's own statement)."""
        holding = self._committed.get(placement_id)
        if holding is not None:
            self._apply(holding, live=False)
            self._log(holding, live=False)

    def unknown(self, live: Iterable[str]) -> list[str]:
        """Of the ``live`` placement ids, those this ledger holds no committed entry for:
        the holdings a snapshot must read."""
        committed = self._committed
        return [pid for pid in live if pid not in committed]

    def replace(self, live: Iterable[str], holdings: Iterable[Holding], since_seq: int) -> None:
        """Take a snapshot of the live placements, read after own change ``since_seq``:
        their ids, and the holdings of at least those :meth:`unknown` named (a live id
        with neither ended meanwhile: the next snapshot tells). Own changes after
        ``since_seq`` are applied again (the snapshot may or may not show them);
        reservations stay. A snapshot older than one already taken is ignored: the
        journal it would need was trimmed."""
        if since_seq < self._since:
            return
        self._since = since_seq
        read = {h.placement_id: h for h in holdings}
        old = self._committed
        fresh = {pid: h for pid in live if (h := old.get(pid) or read.get(pid)) is not None}
        self._journal = [entry for entry in self._journal if entry[0] > since_seq]
        for _, holding, alive in self._journal:
            if alive:
                fresh[holding.placement_id] = holding
            else:
                fresh.pop(holding.placement_id, None)
        self._committed = fresh
        for pid in old.keys() - fresh.keys():
            self._unindex(old[pid])
        for pid in fresh.keys() - old.keys():
            self._index(fresh[pid])

    def _apply(self, holding: Holding, *, live: bool) -> None:
        held = self._committed.pop(holding.placement_id, None)
        if held is not None:
            self._unindex(held)
        if live:
            self._committed[holding.placement_id] = holding
            self._index(holding)

    def _log(self, holding: Holding, *, live: bool) -> None:
        self.seq += 1
        self._journal.append((self.seq, holding, live))

    def _index(self, holding: Holding) -> None:
        for gpu in holding.gpus:
            if holding.share is not None:
                self._shared.setdefault(gpu, {})[holding.placement_id] = holding.share
                if self._gpus.get(gpu) == _SHARED:
                    continue
                self._gpus[gpu] = _SHARED
            else:
                self._gpus[gpu] = holding.placement_id
            self._mask.hold(gpu)
        self._count(holding)

    def _count(self, holding: Holding) -> None:
        self._ports.setdefault(holding.master, Counter())[holding.port] += 1
        milli = holding.milli_per_gpu
        usage = self._usage.setdefault(holding.namespace, Counter())
        for model in holding.models:
            usage[model] += milli

    def _unindex(self, holding: Holding) -> None:
        for gpu in holding.gpus:
            if holding.share is not None:
                tenants = self._shared.get(gpu, {})
                tenants.pop(holding.placement_id, None)
                if tenants or self._gpus.get(gpu) != _SHARED:
                    continue
                del self._shared[gpu]
            elif self._gpus.get(gpu) != holding.placement_id:
                continue
            del self._gpus[gpu]
            self._mask.hold(gpu, held=False)
        ports = self._ports.get(holding.master)
        if ports is not None and holding.port in ports:
            ports[holding.port] -= 1
            if ports[holding.port] <= 0:
                del ports[holding.port]
            if not ports:
                del self._ports[holding.master]
        usage = self._usage.get(holding.namespace)
        if usage is not None:
            milli = holding.milli_per_gpu
            for model in holding.models:
                usage[model] -= milli
            for model in [m for m, n in usage.items() if n <= 0]:
                del usage[model]
