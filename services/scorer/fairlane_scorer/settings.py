"""The scorer's one settings model (flags and ``FAIRLANE_*`` environment)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from fairlane_runtime.settings import ServiceSettings
from fairlane_scorer.core.bindings import IdentityConfig
from fairlane_scorer.core.holding import HoldConfig
from fairlane_scorer.core.rate_limit import RateConfig
from fairlane_scorer.core.speed_book import PublishConfig
from fairlane_scoring.class_reference import ReferenceConfig
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.learned_speed import LearnerConfig

__all__ = ["ScorerSettings"]


class ScorerSettings(ServiceSettings):
    app_id: str = Field("fairlane-scorer", description="Faust app id = consumer group")
    sample_key_ring_file: Path | None = Field(
        None,
        description="the cluster key ring ('<key id> <secret>' lines; docs/security.md): "
        "a node sample not signed by its node's key is dead-lettered; re-read when changed",
    )
    accept_unsigned_samples: bool = Field(
        False,
        description="without a key ring, score samples whoever sent them: anyone who can "
        "write fairlane.node-samples.v1 then speaks for every GPU (a development stack only)",
    )
    web_port: int = Field(6067, ge=1, le=65535, description="/metrics and /healthz port")
    web_bind: str = "127.0.0.1"
    data_dir: Path = Field(Path("fairlane-scorer-data"), description="Faust table storage")
    store: str = Field("memory://", description="memory:// or rocksdb://")
    interval_s: float = Field(30.0, gt=0, description="the agents' collection interval")
    history_s: float = Field(600.0, gt=0)
    recent_weight: float = Field(0.70, gt=0, lt=1)
    recent_window_s: float = Field(300.0, gt=0)
    stale_after_intervals: float = Field(3.0, gt=0)
    emit_epsilon: float = Field(0.01, ge=0)
    heartbeat_s: float = Field(60.0, gt=0)
    batch_max_records: int = Field(
        500, ge=1, description="records per batch: acked together once their output is delivered"
    )
    batch_within_s: float = Field(0.05, gt=0, description="longest wait to fill a batch")
    # aiokafka keeps one open batch per partition and makes a send wait until a full one
    # has gone out: at Faust's 16 KiB (two node rows) a batch's output took one broker
    # round trip per two rows of a partition (docs/scoring.md, "Talking to the broker").
    # At most the topics' max.message.bytes (the broker's default: 1 MiB).
    producer_batch_bytes: int = Field(
        512 * 1024,
        ge=16 * 1024,
        le=1024 * 1024,
        description="bytes of records per partition in one produce request",
    )
    stale_check_s: float = Field(5.0, gt=0, description="how often the staleness timer scans")
    # A node speaks only for its own GPUs (docs/scoring.md, "Identity checks").
    replay_tolerance_s: float = Field(
        300.0,
        ge=0,
        description="a node's record older than its newest by more than this is a replay "
        "(dead-lettered); within it, a redelivery (ignored and counted per GPU)",
    )
    sample_min_spacing_s: float = Field(
        1.0,
        ge=0,
        description="a node's record closer than this (sample time) to its newest is "
        "dead-lettered: a GPU keeps at most history_s / this rows",
    )
    gpu_expire_after_s: float = Field(
        1800.0,
        gt=0,
        description="a node's GPU silent this long (wall clock) is unbound from it and "
        "tombstoned on fairlane.gpu-scores.v1",
    )
    # A node's clock may be off; NTP keeps it within milliseconds, a container shares its
    # host's. Two minutes is a clock gone wrong, not a healthy one (docs/scoring.md).
    max_future_skew_s: float = Field(
        120.0,
        gt=0,
        description="a node's record stamped more than this ahead of the scorer's clock is "
        "dead-lettered (reason future): it would hold its GPUs past their expiry",
    )
    # The node-sample schema's limit of GPUs in one record (NodeSample.gpus).
    max_gpus_per_node: int = Field(
        64,
        ge=1,
        description="live (unexpired) GPUs one node may hold: a record's GPU beyond them "
        "is removed from it and the record dead-lettered (reason gpu_cap)",
    )
    pinned_bindings_file: Path | None = Field(
        None,
        description="an operator's JSON object of GPU uuid -> node, winning over the "
        "node that reported the uuid first; re-read when its mtime changes",
    )
    # aiokafka's next fetch leaves out the partitions still buffered, so while a batch is
    # scored it asks only for partitions without records, and the broker holds it this
    # long before any new input is read (Faust fixes 1,500 ms; docs/scoring.md,
    # "Talking to the broker"). An idle worker fetches about 1,000 / this per second.
    fetch_max_wait_ms: int = Field(
        50, ge=1, le=1500, description="longest a fetch waits at the broker for records"
    )
    # A fetch that came back with a record or two costs the consumer thread ~2-3 ms of
    # CPU (aiokafka decodes the response of every assigned partition in Python): at 100
    # records/s, fetches of 1 byte's minimum took half the worker's CPU. The broker holds
    # a fetch until this many bytes (about four node samples) or the wait.
    fetch_min_bytes: int = Field(
        16 * 1024,
        ge=1,
        le=64 * 1024 * 1024,
        description="bytes a fetch waits for at the broker (at most fetch_max_wait_ms)",
    )
    session_timeout_s: float = Field(
        45.0,
        ge=6,
        le=300,
        description="how long the group waits for a silent worker before its partitions "
        "move to the others (a SIGKILLed worker's partitions sit idle this long)",
    )

    learn_speeds: bool = Field(
        True,
        description="learn each GPU's speed per job class from fairlane.job-progress.v1 "
        "and publish it on fairlane.gpu-speeds.v1",
    )
    speed_cross_job: bool = Field(
        False,
        description="learn each GPU's speed across jobs of a class too (a one-GPU job "
        "teaches its GPU against the class's usual cost); off: on Gavel's jobs it did not "
        "help (docs/evaluation.md, learned speed)",
    )
    speed_epsilon: float = Field(
        0.01, ge=0, description="a learned speed moving more than this is published"
    )
    speed_heartbeat_s: float = Field(
        300.0, gt=0, description="each learned speed is published at least this often"
    )
    speed_min_peers: int = Field(
        3, ge=1, description="GPUs of a model learned before speeds are read against them"
    )
    speed_retention_s: float = Field(
        7 * 86_400.0,
        gt=0,
        description="a GPU neither sampled nor reported on for this long (event time) is "
        "forgotten: its learned speeds are tombstoned on fairlane.gpu-speeds.v1",
    )
    speed_check_s: float = Field(5.0, gt=0, description="how often the speed heartbeat scans")
    speed_clock_epsilon: float = Field(
        0.01,
        ge=0,
        description="a GPU's SM clock while busy moving by more than this fraction "
        "reaches the learner (its NVML prior)",
    )

    progress_hold_s: float = Field(
        900.0,
        gt=0,
        description="how long (event time: the progress records' and placement events' "
        "ts_ms) a progress record waits for its placement before it is dead-lettered, "
        "and an ended placement's GPUs stay known for its last reports",
    )
    progress_hold_per_placement: int = Field(
        64, ge=1, description="progress records held for one placement at most"
    )
    progress_hold_total: int = Field(
        10_000, ge=1, description="progress records held in one partition at most"
    )
    progress_rate_per_s: float = Field(
        20.0,
        gt=0,
        description="job-progress records one placement may send per second of event time "
        "(their ts_ms) beyond its burst; more are dead-lettered as rate_limited. A launcher "
        "sends one per host per --window-s (60 s): 20/s is 1,024 hosts at 60 s",
    )
    progress_burst: int = Field(
        2048,
        ge=1,
        description="job-progress records one placement may send at once: every host of "
        "a 1,024-node placement closing its window and its last, partial one together",
    )

    @model_validator(mode="after")
    def _node_identity_decided(self) -> ScorerSettings:
        if self.sample_key_ring_file is None and not self.accept_unsigned_samples:
            raise ValueError(
                "set sample_key_ring_file (FAIRLANE_SAMPLE_KEY_RING_FILE), or "
                "FAIRLANE_ACCEPT_UNSIGNED_SAMPLES=true to score unsigned samples"
            )
        return self

    @model_validator(mode="after")
    def _identity_limits_fit(self) -> ScorerSettings:
        if self.sample_min_spacing_s > self.interval_s:
            raise ValueError("sample_min_spacing_s must not exceed interval_s")
        if self.gpu_expire_after_s <= self.interval_s * self.stale_after_intervals:
            raise ValueError("gpu_expire_after_s must exceed stale_after (a GPU goes stale first)")
        return self

    def identity_config(self) -> IdentityConfig:
        return IdentityConfig(
            replay_tolerance_s=self.replay_tolerance_s,
            sample_min_spacing_s=self.sample_min_spacing_s,
            gpu_expire_after_s=self.gpu_expire_after_s,
            max_future_skew_s=self.max_future_skew_s,
            max_gpus_per_node=self.max_gpus_per_node,
        )

    def rate_config(self) -> RateConfig:
        return RateConfig(rate_per_s=self.progress_rate_per_s, burst=self.progress_burst)

    def hold_config(self) -> HoldConfig:
        return HoldConfig(
            hold_s=self.progress_hold_s,
            per_placement=self.progress_hold_per_placement,
            total=self.progress_hold_total,
        )

    def learner_config(self) -> LearnerConfig:
        return LearnerConfig(cross_job=ReferenceConfig() if self.speed_cross_job else None)

    def publish_config(self) -> PublishConfig:
        return PublishConfig(
            epsilon=self.speed_epsilon,
            heartbeat_s=self.speed_heartbeat_s,
            min_peers=self.speed_min_peers,
            retention_s=self.speed_retention_s,
        )

    def score_config(self) -> ScoreConfig:
        return ScoreConfig(
            recent_weight=self.recent_weight,
            recent_window_s=self.recent_window_s,
            history_s=self.history_s,
            interval_s=self.interval_s,
            stale_after_intervals=self.stale_after_intervals,
            emit_epsilon=self.emit_epsilon,
            heartbeat_s=self.heartbeat_s,
        )
