"""The idle watch's orchestration over the in-memory twins (fake time): who is looked
up, once per episode, the lease held by the namespace's policy only."""

from __future__ import annotations

from fairlane_events.records import GpuSlot, NodeAssignment
from fairlane_scheduler.adapters.memory_idle_store import MemoryIdleStore
from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.idle import IdlePolicy, IdleTracker
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.idle_watch import IdleWatch
from tests.factories import gpu_score

T0 = 1_700_000_000_000
MINUTE = 60_000
GPUS = ("GPU-0", "GPU-1")


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


def placement(pid: str, namespace: str = "team", lease_ms: int | None = None) -> Placement:
    node = NodeAssignment(
        node="n1",
        node_rank=0,
        gpus=[GpuSlot(uuid=uuid, index=i) for i, uuid in enumerate(GPUS)],
        cuda_visible_devices="0,1",
        master_addr="n1",
        master_port=29500,
        world_size=2,
    )
    return Placement(pid, f"job-{pid}", namespace, "placed", T0, (node,), "f", lease_ms)


class Rig:
    """A fleet whose two GPUs one placement holds, and the watch over it."""

    def __init__(self, *, held: bool = True, lease_ms: int | None = None) -> None:
        self.clock = Clock()
        self.fleet = FleetView()
        self.tracker = IdleTracker(IdlePolicy(window_s=600.0))
        self.store = MemoryStore()
        self.store.placements["p1"] = placement("p1", lease_ms=lease_ms)
        self.idle_store = MemoryIdleStore(self.store)
        self.announced: list[str] = []
        self.watch = IdleWatch(
            store=self.idle_store,
            tracker=self.tracker,
            fleet=self.fleet,
            clock_ms=self.clock,
            check_s=15.0,
            announced=lambda p: self.announced.append(p.id),
        )
        self.report(0.0)
        if held:
            for uuid in GPUS:
                self.fleet.hold(uuid)

    def report(self, activity: float) -> None:
        """Both GPUs' score records at the clock's time, as the follower feeds them."""
        for i, uuid in enumerate(GPUS):
            score = gpu_score(uuid=uuid, index=i, ts_ms=self.clock.now_ms, activity=activity)
            self.fleet.apply(score)
            self.tracker.observe(score)

    async def minutes(self, count: int, activity: float) -> list[str]:
        """A heartbeat record a minute and a check after each; what was announced."""
        announced = []
        for _ in range(count):
            self.clock.now_ms += MINUTE
            self.report(activity)
            announced += await self.watch.check()
        return announced


async def test_an_idle_placement_is_announced_once_per_episode() -> None:
    rig = Rig()
    assert await rig.minutes(9, 0.0) == []  # not yet the window
    assert await rig.minutes(1, 0.0) == ["p1"]
    assert await rig.minutes(5, 0.0) == []  # the same episode
    assert rig.watch.idle == {"p1"}
    assert [e.event for e in rig.store.events] == ["idle"]
    assert rig.store.events[0].idle_since_ms == T0
    assert rig.store.events[0].lease_expires_ms is None
    assert await rig.minutes(1, 0.5) == []  # busy: the episode ends
    assert rig.watch.idle == frozenset()
    # The new run of idle records starts at the first one after the busy record.
    assert await rig.minutes(10, 0.0) == []
    assert await rig.minutes(1, 0.0) == ["p1"]  # a new episode, announced again
    assert rig.announced == ["p1", "p1"]


async def test_gpus_no_placement_holds_are_not_looked_up() -> None:
    rig = Rig(held=False)
    assert await rig.minutes(12, 0.0) == []
    assert rig.store.events == []


async def test_a_check_before_its_interval_does_nothing() -> None:
    rig = Rig()
    await rig.minutes(10, 0.0)
    rig.store.events.clear()
    rig.idle_store.episodes.clear()  # as if the episode were never recorded
    assert await rig.watch.check() == []  # 0 s after the last check: not due
    rig.clock.now_ms += 15_000
    assert await rig.watch.check() == ["p1"]


async def test_only_the_namespaces_policy_shortens_the_lease_and_renewals_are_held() -> None:
    lease_ms = T0 + 3600_000
    without = Rig(lease_ms=lease_ms)
    await without.minutes(10, 0.0)
    assert without.store.placements["p1"].lease_expires_at_ms == lease_ms
    rig = Rig(lease_ms=lease_ms)
    await rig.idle_store.set_idle_lease_s("team", 120.0)
    await rig.minutes(10, 0.0)
    warned_ms = rig.clock.now_ms
    assert rig.store.events[-1].lease_expires_ms == warned_ms + 120_000
    assert rig.store.placements["p1"].lease_expires_at_ms == warned_ms + 120_000
    # A renewal moves the lease later; the next check holds it to the policy's end.
    await rig.store.renew("p1", rig.clock.now_ms, 3600.0)
    await rig.minutes(1, 0.0)
    assert rig.store.placements["p1"].lease_expires_at_ms == warned_ms + 120_000


async def test_a_replica_that_missed_the_busy_record_does_not_announce_the_old_episode() -> None:
    rig = Rig()
    assert await rig.minutes(10, 0.0) == ["p1"]
    # Another replica read a busy record a minute ago and ended the episode; this one
    # has not read it (its tracker still says idle since T0).
    await rig.idle_store.end_episodes({"p1": rig.clock.now_ms - MINUTE})
    assert await rig.minutes(1, 0.0) == []
    assert [e.event for e in rig.store.events] == ["idle"]
