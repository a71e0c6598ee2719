"""What every scenario gets (the stack, the load, the plan) and what each ends with: wait
until the stack has recovered, then count what was lost or duplicated."""

from __future__ import annotations

import asyncio
import collections
import shutil
import time
from dataclasses import dataclass, field

from fairlane_events.topics import STREAM_PARTITIONS
from tests.chaos.audit import (
    PlacementAudit,
    SampleAudit,
    audit_placements,
    audit_samples,
    outbox_unpublished,
    scrape,
    wait_until,
)
from tests.chaos.load import LoadDriver, outside_contract
from tests.chaos.report import Row
from tests.chaos.stack import ChaosStack

__all__ = ["FULL_ORDER", "Context", "Plan"]

#: Free space the changelogs' small log dir keeps outside the disk scenario (logdirs.py).
SMALL_DIR_SPARE_BYTES = 8 << 20

FULL_ORDER = (
    "kafka", "scorer", "replica", "postgres", "hostile", "forged_node", "uuid_collision",
    "replay", "flood", "big_body", "big_body_token", "slow_body", "sustained", "partition",
    "disk",
)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """How long each fault lasts. ``short``: what CI runs (each fault once, short)."""

    outage_s: float
    sustained_s: float
    rss_every_s: float
    partition_s: float
    fuzz_examples: int
    recovery_timeout_s: float = 240
    #: The scenarios in order (names in suite.SCENARIOS): the issue's order of value.
    order: tuple[str, ...] = FULL_ORDER

    @classmethod
    def short(cls) -> Plan:
        """Each fault once, shorter. The scorer's kill comes first: its parity check then
        tests the kill alone, not a state a broker restart already damaged (a known
        scorer defect, docs/reliability.md, that the full run's order shows)."""
        order = ("scorer", "kafka", *(n for n in FULL_ORDER if n not in ("scorer", "kafka")))
        return cls(
            outage_s=15, sustained_s=30, rss_every_s=10, partition_s=15, fuzz_examples=5,
            order=order,
        )  # fmt: skip

    @classmethod
    def full(cls) -> Plan:
        return cls(outage_s=60, sustained_s=600, rss_every_s=60, partition_s=60, fuzz_examples=25)


@dataclass
class Context:
    stack: ChaosStack
    load: LoadDriver
    plan: Plan
    samples: SampleAudit | None = None  # the last audits, for per-scenario differences
    placements: PlacementAudit | None = None
    extra_agents: list[str] = field(default_factory=list)  # metrics URLs of other agents
    #: (partition, offset) of node samples a scenario wrote under the fleet's names (a
    #: replay): not the agent's, so the sample audit leaves them out.
    injected: set[tuple[int, int]] = field(default_factory=set)
    #: What one scenario's work leaves for the rows that share it (telemetry.py's pass).
    shared: dict[str, object] = field(default_factory=dict)

    def agent_drained(self) -> bool:
        for url in [self.stack.agent_url, *self.extra_agents]:
            m = scrape(f"{url}/metrics")
            if m["fairlane_agent_samples_published_total"] < m["fairlane_agent_samples_read_total"]:
                return False
        return True

    def scorer_working(self) -> bool:
        """The scorer owns every partition and has scored since it started."""
        m = scrape(f"{self.stack.scorer_url}/metrics")
        return (
            m["fairlane_scorer_assigned_partitions"] == STREAM_PARTITIONS
            and m["fairlane_scorer_gpu_samples_scored_total"] > 0
        )

    def recovered(self) -> bool:
        """The agent's backlog is on Kafka, the scorer scores, every replica is ready,
        the outbox is empty."""
        return (
            self.agent_drained()
            and self.scorer_working()
            and self.stack.all_ready()
            and asyncio.run(outbox_unpublished(self.stack.database_url)) == 0
        )

    def log_sizes(self) -> dict[str, int]:
        """Where each scheduler replica's log ends now."""
        services = self.stack.services.items()
        return {n: s.log.stat().st_size for n, s in services if n.startswith("scheduler")}

    def logged_since(self, sizes: dict[str, int]) -> dict[str, str]:
        """What each replica logged since ``sizes`` were taken."""
        out = {}
        for name, size in sizes.items():
            with self.stack.services[name].log.open("rb") as f:
                f.seek(size)
                out[name] = f.read().decode(errors="replace")
        return out

    def loads(self) -> collections.Counter[str]:
        return self.load.ledger.snapshot()

    def finish(
        self,
        row: Row,
        fault_ended: float,
        load_before: collections.Counter[str],
        allowed: tuple[str, ...] = (),
    ) -> None:
        """Wait for recovery (timed from ``fault_ended``, a monotonic instant), then
        audit: what was lost or duplicated since the previous scenario's audit. The load
        must have had only the contract's answers, and ``allowed`` outcomes."""
        took = wait_until(self.recovered, self.plan.recovery_timeout_s)
        if took is None:
            row.recovery = f"not within {self.plan.recovery_timeout_s:.0f} s"
            row.failures.append("no recovery")
        else:
            row.recovery = f"{time.monotonic() - fault_ended:.1f} s"
        row.load = self.load.held(load_before)
        now = self.loads()
        answers = sorted(((now[k] - load_before.get(k, 0), k) for k in now), reverse=True)
        row.notes.append("answers: " + ", ".join(f"{k} x{n}" for n, k in answers if n))
        odd = [f"{k} x{n}" for n, k in answers if n and outside_contract(k) and k not in allowed]
        row.check(not odd, "the load got answers outside the contract: " + ", ".join(odd))
        stack = self.stack
        samples = asyncio.run(
            audit_samples(stack.bootstrap, stack.agent_url, stack.prefix, self.injected)
        )
        placements = asyncio.run(
            audit_placements(stack.bootstrap, stack.database_url, self.load.ledger)
        )
        before_s, before_p = self.samples, self.placements
        lost_s = samples.lost - (before_s.lost if before_s else 0)
        dup_s = samples.duplicates - (before_s.duplicates if before_s else 0)
        dup_e = placements.events_duplicated - (before_p.events_duplicated if before_p else 0)
        row.lost = (
            f"samples {lost_s}, placements {placements.missing}, events {placements.events_lost}"
        )
        row.duplicated = f"samples {dup_s}, events {dup_e} (at least once)"
        row.check(lost_s == 0, f"{lost_s} samples lost")
        row.check(samples.out_of_order == 0, f"{samples.out_of_order} nodes out of order")
        row.check(dup_s == 0, f"{dup_s} samples duplicated")
        row.check(placements.missing == 0, f"{placements.missing} answered placements missing")
        row.check(placements.wrong_size == 0, f"{placements.wrong_size} partial placements")
        over = placements.gpu_overcommitted
        row.check(over == 0, f"{over} GPUs over-committed (above a whole GPU or its memory)")
        row.check(placements.release_lost == 0, f"{placements.release_lost} releases lost")
        row.check(placements.events_lost == 0, f"{placements.events_lost} outbox events lost")
        if placements.lost_events:
            row.notes.append("events not on the topic: " + "; ".join(placements.lost_events))
        if (small := stack.small_log_dir) is not None:  # filled only by the disk scenario
            disk = shutil.disk_usage(small)
            used = f"{(disk.total - disk.free) >> 20} of {disk.total >> 20} MiB"
            row.check(
                disk.free > SMALL_DIR_SPARE_BYTES, f"the changelogs filled their dir ({used})"
            )
        dead = [s.name for s in stack.services.values() if not s.alive]
        row.check(not dead, f"crashed: {', '.join(dead)}")
        self.samples, self.placements = samples, placements
