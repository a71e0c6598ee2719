"""The Faust application: topics, tables, agents, the staleness timer, web pages.

``create_app(settings)`` is the composition root; nothing here runs at import time.
Records are read as raw bytes and decoded by the wire contract, so a malformed record is
dead-lettered and counted instead of crashing the stream; :mod:`fairlane_scorer.agents`
says what happens to each batch (:mod:`fairlane_scorer.batches`: the scorer's own
batching, reported processed only once delivered; :mod:`fairlane_scorer.consumer`
commits only contiguous runs of processed offsets).

Tables, both co-partitioned with ``fairlane.node-samples.v1`` (key = node):

- ``node-windows``: node -> the windows of its GPUs (:mod:`fairlane_scorer.core.node_rows`),
  one row written per node and batch (the decoded windows in the table, their bytes on
  the changelog).
- ``node-allocations``: node -> Fairlane's placements on it. Placement events are keyed
  by placement id; one agent re-keys them by node onto an internal topic with the same
  partition count, a second applies them to the table.

The speed learner (:mod:`fairlane_scorer.speed_agents` and
:mod:`fairlane_scorer.progress_agents`, unless ``learn_speeds`` is off):

- ``placement-gpus``: placement id -> its GPUs, co-partitioned with
  ``fairlane.placements.v1`` and ``fairlane.job-progress.v1`` (both keyed by placement
  id), written by the placements agent and read by the progress agent;
- ``progress-held``: placement id -> the progress records read before their placement
  (:mod:`fairlane_scorer.held_progress`), co-partitioned likewise;
- ``placement-ended``: placement id -> when it ended, while its ``placement-gpus`` row
  stays for its last reports (:mod:`fairlane_scorer.ended_placements`), likewise;
- ``speed-gpu-infos``, ``speed-rows`` and ``speed-class-references`` (written only when
  the learner learns across jobs): the learner's state, co-partitioned with its
  single-partition input topic (``<app id>-speed-input``), which the progress agent and
  the scoring agent write to; a timer re-publishes quiet speeds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from types import MappingProxyType
from typing import Any, cast

import faust
from faust.types import Message
from prometheus_client import generate_latest

from fairlane_events import topics
from fairlane_events.topics import TopicSpec
from fairlane_runtime.kafka_security import KafkaSecurity
from fairlane_scorer.agents import ScoringAgents, now_ms
from fairlane_scorer.batches import Batches, BatchHandler, one_by_one
from fairlane_scorer.consumer import ScorerConsumer, install_transport
from fairlane_scorer.core.rate_limit import RateLimiter
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.ended_placements import EndedPlacements
from fairlane_scorer.held_progress import ProgressHold
from fairlane_scorer.identity import NodeIdentity, pinned_bindings
from fairlane_scorer.metrics import ScorerMetrics
from fairlane_scorer.progress_agents import ProgressAgents
from fairlane_scorer.sample_signatures import SignatureCheck
from fairlane_scorer.settings import ScorerSettings
from fairlane_scorer.speed_agents import SpeedAgents

__all__ = [
    "ALLOCATIONS_TABLE",
    "GPU_INFOS_TABLE",
    "HELD_PROGRESS_TABLE",
    "PLACEMENT_ENDED_TABLE",
    "PLACEMENT_GPUS_TABLE",
    "SPEED_ROWS_TABLE",
    "WINDOWS_TABLE",
    "create_app",
    "faust_credentials",
    "placements_by_node_topic",
    "scorer_topics",
    "speed_input_topic",
]

WINDOWS_TABLE = "node-windows"
ALLOCATIONS_TABLE = "node-allocations"
PLACEMENT_GPUS_TABLE = "placement-gpus"
HELD_PROGRESS_TABLE = "progress-held"
PLACEMENT_ENDED_TABLE = "placement-ended"
GPU_INFOS_TABLE = "speed-gpu-infos"
SPEED_ROWS_TABLE = "speed-rows"
SPEED_REFERENCES_TABLE = "speed-class-references"


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{hostport.strip()}" for hostport in bootstrap.split(",") if hostport.strip()]


def placements_by_node_topic(app_id: str) -> str:
    """The scorer's internal topic of placement events keyed by node."""
    return f"{app_id}-placements-by-node"


def speed_input_topic(app_id: str) -> str:
    """The speed learner's input topic (one partition: the learner's state is one)."""
    return f"{app_id}-speed-input"


def scorer_topics(app_id: str) -> list[TopicSpec]:
    """The scorer's own topics (the re-keyed placements, the tables' changelogs), to be
    created and checked with the wire topics before the worker starts: a consumer that
    subscribes before Faust has declared them ignores them for good ("Ignoring missing
    topic"), and a changelog with another partition count than its source crash-loops
    the agent."""
    compacted = MappingProxyType({"cleanup.policy": "compact"})
    return [
        TopicSpec(placements_by_node_topic(app_id), topics.STREAM_PARTITIONS),
        *(
            TopicSpec(f"{app_id}-{table}-changelog", topics.STREAM_PARTITIONS, compacted)
            for table in (
                WINDOWS_TABLE,
                ALLOCATIONS_TABLE,
                PLACEMENT_GPUS_TABLE,
                HELD_PROGRESS_TABLE,
                PLACEMENT_ENDED_TABLE,
            )
        ),
        TopicSpec(speed_input_topic(app_id), 1),
        *(
            TopicSpec(f"{app_id}-{table}-changelog", 1, compacted)
            for table in (GPU_INFOS_TABLE, SPEED_ROWS_TABLE, SPEED_REFERENCES_TABLE)
        ),
    ]


def faust_credentials(security: KafkaSecurity) -> dict[str, Any]:
    """``faust.App`` keyword arguments for the one Kafka security block: SASL as
    :class:`faust.SASLCredentials` (its ``ssl_context`` makes it SASL_SSL), TLS alone as
    :class:`faust.SSLCredentials`; PLAINTEXT adds nothing."""
    if security.uses_sasl:
        creds: faust.types.auth.CredentialsT = faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password_value(),
            mechanism=security.sasl_mechanism,
            ssl_context=security.ssl_context(),  # None: SASL_PLAINTEXT
        )
    elif security.uses_ssl:
        creds = faust.SSLCredentials(security.ssl_context())
    else:
        return {}
    return {"broker_credentials": creds}


def _faust_app(settings: ScorerSettings) -> faust.App:
    app = faust.App(
        settings.app_id,
        broker=_broker_urls(settings.kafka_bootstrap_servers),
        **faust_credentials(settings.kafka_security()),
        store=settings.store,
        datadir=str(settings.data_dir),
        topic_partitions=topics.STREAM_PARTITIONS,
        topic_replication_factor=1,
        topic_allow_declare=True,
        # The staleness scan reads the table: only GPUs this worker owns may be in it.
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        # A rebalance waits for every record in flight (ScorerConsumer.processed) before
        # the recovery reads the changelogs' high watermarks.
        stream_wait_empty=True,
        producer_max_batch_size=settings.producer_batch_bytes,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_bind,
        web_in_thread=False,
    )
    # commits only acknowledged offsets, fetches wait less (fairlane_scorer.consumer)
    install_transport(app, settings.fetch_max_wait_ms, settings.fetch_min_bytes)
    return app


def _agents(app: faust.App, settings: ScorerSettings, metrics: ScorerMetrics) -> ScoringAgents:
    def raw_topic(name: str, **kwargs: Any) -> faust.TopicT:
        return app.topic(name, key_serializer="raw", value_serializer="raw", **kwargs)

    partitions = topics.STREAM_PARTITIONS

    def table(name: str, parts: int = partitions, **kwargs: Any) -> faust.Table[str, Any]:
        # app.Table is typed as TableT, which lacks the serializers Deliveries.write uses.
        made = app.Table(name, default=None, partitions=parts, **kwargs)
        return cast("faust.Table[str, Any]", made)

    speeds = None
    if settings.learn_speeds:
        speed_input = raw_topic(speed_input_topic(settings.app_id), partitions=1, internal=True)
        progress = ProgressAgents(
            metrics=metrics,
            speed_input=speed_input,
            dead_letters=raw_topic(topics.DEAD_LETTER),
            placement_gpus=table(PLACEMENT_GPUS_TABLE, value_type=bytes),
            hold=ProgressHold(settings.hold_config(), table(HELD_PROGRESS_TABLE, value_type=bytes)),
            ended=EndedPlacements(
                settings.progress_hold_s, table(PLACEMENT_ENDED_TABLE, value_type=bytes)
            ),
            limiter=RateLimiter(settings.rate_config()),
        )
        speeds = SpeedAgents(
            learner=settings.learner_config(),
            publish=settings.publish_config(),
            clock_epsilon=settings.speed_clock_epsilon,
            metrics=metrics,
            speed_input=speed_input,
            speeds=raw_topic(topics.GPU_SPEEDS),
            dead_letters=raw_topic(topics.DEAD_LETTER),
            progress=progress,
            gpu_infos=table(GPU_INFOS_TABLE, 1, value_type=bytes),
            rows=table(SPEED_ROWS_TABLE, 1, value_type=bytes),
            references=table(SPEED_REFERENCES_TABLE, 1, value_type=bytes),
        )
    return ScoringAgents(
        config=settings.score_config(),
        metrics=metrics,
        scores=raw_topic(topics.GPU_SCORES),
        dead_letters=raw_topic(topics.DEAD_LETTER),
        by_node=raw_topic(
            placements_by_node_topic(settings.app_id), partitions=partitions, internal=True
        ),
        windows=table(WINDOWS_TABLE, value_type=bytes),
        allocations=table(ALLOCATIONS_TABLE),
        identity=NodeIdentity(
            settings.identity_config(),
            metrics,
            None
            if settings.pinned_bindings_file is None
            else pinned_bindings(settings.pinned_bindings_file),
        ),
        speeds=speeds,
        signatures=(
            None
            if settings.sample_key_ring_file is None
            else SignatureCheck(settings.sample_key_ring_file)
        ),
    )


def _observe(app: faust.App, metrics: ScorerMetrics, messages: list[Message], t0: float) -> None:
    """The batch's size; per record: its share of the batch's time, its age; the lag behind
    each partition's high watermark after the batch."""
    per_record = (time.perf_counter() - t0) / max(1, len(messages))
    metrics.batch_records.observe(len(messages))
    now = time.time()
    last = {}
    for message in messages:
        metrics.processing_s.observe(per_record)
        metrics.record_age_s.observe(max(0.0, now - message.timestamp))
        last[message.tp] = message.offset
    assigned = app.consumer.assignment()
    for tp, offset in last.items():
        if tp not in assigned:  # a batch finished while its partition was given up
            continue
        highwater = app.consumer.highwater(tp)
        if highwater is not None:
            metrics.lag.labels(str(tp.partition)).set(max(0, highwater - offset - 1))


def _learn_speeds(
    app: faust.App,
    settings: ScorerSettings,
    speeds: SpeedAgents,
    in_batches: Callable[[faust.StreamT[bytes], faust.TopicT, BatchHandler], Awaitable[None]],
) -> None:
    """The speed learner's agents and heartbeat (:mod:`fairlane_scorer.speed_agents`)."""
    progress = app.topic(
        topics.JOB_PROGRESS,
        partitions=topics.STREAM_PARTITIONS,
        key_serializer="raw",
        value_serializer="raw",
    )

    async def check(message: Message, out: Deliveries) -> None:
        await speeds.progress.on_progress(message, out, now_ms())

    @app.agent(progress)
    async def join_progress(stream: faust.StreamT[bytes]) -> None:
        await in_batches(stream, progress, one_by_one(check))

    @app.agent(speeds.speed_input)
    async def learn_speeds(stream: faust.StreamT[bytes]) -> None:
        async def handle(messages: list[Message], out: Deliveries) -> None:
            await speeds.on_input(messages, out, now_ms())

        await in_batches(stream, speeds.speed_input, handle)

    learner_input = speeds.speed_input.get_topic_name()

    async def speed_heartbeat() -> None:
        if app.rebalancing:  # the recovery may not have rebuilt the tables yet
            return
        owned = any(tp.topic == learner_input for tp in app.assignor.assigned_actives())
        await speeds.heartbeat(now_ms(), owned)

    app.timer(interval=settings.speed_check_s)(speed_heartbeat)


def create_app(settings: ScorerSettings, metrics: ScorerMetrics | None = None) -> faust.App:
    metrics = metrics or ScorerMetrics.create()
    app = _faust_app(settings)
    agents = _agents(app, settings, metrics)
    agents.windows.on_recover(agents.reindex)  # the bindings of the rows recovered
    metrics.assigned_partitions.set_function(
        lambda: sum(tp.topic == topics.NODE_SAMPLES for tp in app.assignor.assigned_actives())
    )
    samples = app.topic(
        topics.NODE_SAMPLES,
        partitions=topics.STREAM_PARTITIONS,
        key_serializer="raw",
        value_serializer="raw",
    )

    def in_batches(
        stream: faust.StreamT[bytes], topic: faust.TopicT, handle: BatchHandler
    ) -> Awaitable[None]:
        batches = Batches(
            handle,
            consumer=cast(ScorerConsumer, app.consumer),
            producer=app.producer,
            max_records=settings.batch_max_records,
            within_s=settings.batch_within_s,
            on_gap=metrics.delivery_gaps.inc,
        )
        return batches.consume(stream, topic.topics)

    placements = app.topic(
        topics.PLACEMENTS,
        partitions=topics.STREAM_PARTITIONS,
        key_serializer="raw",
        value_serializer="raw",
    )

    @app.agent(samples)
    async def score_samples(stream: faust.StreamT[bytes]) -> None:
        async def handle(messages: list[Message], out: Deliveries) -> None:
            t0 = time.perf_counter()
            await agents.on_samples(messages, out)
            _observe(app, metrics, messages, t0)

        await in_batches(stream, samples, handle)

    @app.agent(placements)
    async def route_placements(stream: faust.StreamT[bytes]) -> None:
        await in_batches(stream, placements, one_by_one(agents.on_placement))

    @app.agent(agents.by_node)
    async def apply_placements(stream: faust.StreamT[bytes]) -> None:
        await in_batches(stream, agents.by_node, one_by_one(agents.on_node_placement))

    async def announce_stale() -> None:
        if agents.signatures is not None:
            agents.signatures.refresh()
        if app.rebalancing:  # the recovery may not have rebuilt the table yet
            return
        owned = {
            tp.partition
            for tp in app.assignor.assigned_actives()
            if tp.topic == topics.NODE_SAMPLES
        }
        await agents.announce_stale(now_ms(), owned)

    app.timer(interval=settings.stale_check_s)(announce_stale)
    if agents.speeds is not None:
        _learn_speeds(app, settings, agents.speeds, in_batches)

    @app.page("/metrics")
    async def metrics_page(view: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return view.bytes(generate_latest(metrics.registry), content_type="text/plain")

    @app.page("/healthz")
    async def healthz(view: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return view.json({"status": "ok"})

    return app
