"""The Faust application: topics, the per-GPU window table, the scoring agent, web pages.

``create_app(settings)`` is the composition root; nothing here runs at import time.
Records are read as raw bytes and decoded by the wire contract, so a malformed record is
dead-lettered and counted instead of crashing the stream.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import faust
from prometheus_client import generate_latest

from fairlane_events import topics
from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.dead_letter import dead_letter_for
from fairlane_events.records import NodeSample
from fairlane_scorer.core.records import model_speed, score_record
from fairlane_scorer.core.window import GpuWindow, accept_sample, score_window, should_emit
from fairlane_scorer.metrics import ScorerMetrics
from fairlane_scorer.settings import ScorerSettings

__all__ = ["create_app"]

log = logging.getLogger("fairlane.scorer")


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{hostport.strip()}" for hostport in bootstrap.split(",") if hostport.strip()]


def create_app(settings: ScorerSettings, metrics: ScorerMetrics | None = None) -> faust.App:
    config = settings.score_config()
    metrics = metrics or ScorerMetrics.create()
    app = faust.App(
        settings.app_id,
        broker=_broker_urls(settings.kafka_bootstrap_servers),
        store=settings.store,
        datadir=str(settings.data_dir),
        topic_partitions=topics.STREAM_PARTITIONS,
        topic_replication_factor=1,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_bind,
        web_in_thread=False,
    )
    samples = app.topic(
        topics.NODE_SAMPLES,
        partitions=topics.STREAM_PARTITIONS,
        key_serializer="raw",
        value_serializer="raw",
    )
    scores = app.topic(topics.GPU_SCORES, key_serializer="raw", value_serializer="raw")
    dead_letters = app.topic(topics.DEAD_LETTER, key_serializer="raw", value_serializer="raw")
    windows = app.Table("gpu-windows", default=None, partitions=topics.STREAM_PARTITIONS)
    unknown_models: set[str] = set()

    async def reject(event: faust.EventT[Any], error: str) -> None:
        msg = event.message
        record = dead_letter_for(
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            error=error,
            now_ms=int(time.time() * 1000),
        )
        await dead_letters.send(value=encode(record))
        metrics.dead_lettered.inc()
        log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, error)

    async def score_node(sample: NodeSample) -> None:
        for gpu in sample.gpus:
            stored = windows.get(gpu.uuid)
            previous = None if stored is None else GpuWindow.from_dict(stored)
            window = accept_sample(previous, sample.node, sample.ts_ms, gpu, config)
            if window is None:
                metrics.duplicates.inc()
                continue
            metrics.scored.inc()
            result = score_window(window, sample.ts_ms, config)
            if should_emit(window, result, sample.ts_ms, config):
                if not model_speed(gpu.model)[1] and gpu.model not in unknown_models:
                    unknown_models.add(gpu.model)
                    log.warning("unknown GPU model %r: assuming the default speed", gpu.model)
                await scores.send(
                    key=gpu.uuid.encode(),
                    value=encode(score_record(gpu.uuid, window, result)),
                    timestamp=sample.ts_ms / 1000,
                )
                metrics.emitted.inc()
                window = replace(
                    window,
                    emitted_score=result.score,
                    emitted_stale=result.stale,
                    emitted_at_ms=sample.ts_ms,
                )
            # Reassign, never mutate in place: only assignments reach the changelog.
            windows[gpu.uuid] = window.to_dict()

    @app.agent(samples)
    async def score_samples(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            metrics.records_in.inc()
            with metrics.processing_s.time():
                try:
                    sample = decode(NodeSample, event.message.value)
                except DecodeError as exc:
                    await reject(event, str(exc))
                    continue
                await score_node(sample)

    @app.page("/metrics")
    async def metrics_page(view: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return view.bytes(generate_latest(metrics.registry), content_type="text/plain")

    @app.page("/healthz")
    async def healthz(view: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return view.json({"status": "ok"})

    return app
