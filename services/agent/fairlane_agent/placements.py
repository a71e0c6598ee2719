"""Simulation only: follow ``fairlane.placements.v1`` so that the simulated GPUs carry
the jobs Fairlane placed on them (DESIGN: "simulation closes the same loop").

Read from the beginning without a consumer group, like the scheduler's scores follower:
every agent rebuilds which jobs run where. Placements on GPUs of other fleets are
ignored by the simulator; records that do not decode are skipped and counted.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer

from fairlane_agent.metrics import AgentMetrics
from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import PlacementEvent
from fairlane_events.topics import PLACEMENTS
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity
from fairlane_sim.fleet import FleetSimulator

__all__ = ["apply_placement", "follow_placements"]

log = logging.getLogger("fairlane.agent.placements")

_ENDS = frozenset({"released", "expired", "failed"})


def apply_placement(fleet: FleetSimulator, event: PlacementEvent) -> None:
    """Start the job on its GPUs when placed (a fractional one loads its GPU in
    proportion to its share); end it when released, expired or failed."""
    if event.event == "created":
        slots = [gpu for node in event.nodes for gpu in node.gpus]
        share = min((1.0 if gpu.share is None else gpu.share for gpu in slots), default=1.0)
        fleet.start_job(event.placement_id, [gpu.uuid for gpu in slots], event.ts_ms, share)
    elif event.event in _ENDS:
        fleet.end_job(event.placement_id, event.ts_ms)


async def follow_placements(
    bootstrap: str,
    fleet: FleetSimulator,
    metrics: AgentMetrics,
    stop: asyncio.Event,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    consumer = AIOKafkaConsumer(
        PLACEMENTS,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        **security.aiokafka_kwargs(),
    )
    await consumer.start()
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    try:
                        apply_placement(fleet, decode(PlacementEvent, record.value))
                    except DecodeError as exc:
                        metrics.placements_skipped.inc()
                        log.warning("placement at offset %d skipped: %s", record.offset, exc)
    finally:
        await consumer.stop()
