"""The scorer's Prometheus metrics, on a registry of its own (no import-time globals)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from fairlane_scorer.core.node_identity import REASONS as IDENTITY_REASONS
from fairlane_scorer.core.progress import REASONS
from fairlane_scorer.sample_signatures import REASONS as SIGNATURE_REASONS

__all__ = ["ScorerMetrics"]

_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _by_reason(
    name: str, documentation: str, reasons: Iterable[str], registry: CollectorRegistry
) -> Counter:
    """A counter by ``reason``, every reason shown (at 0 until it happens)."""
    counter = Counter(name, documentation, ["reason"], registry=registry)
    for reason in reasons:
        counter.labels(reason)
    return counter


@dataclass(frozen=True)
class ScorerMetrics:
    registry: CollectorRegistry
    records_in: Counter
    unverified: Counter  # by reason
    dead_lettered: Counter
    duplicates: Counter
    scored: Counter
    emitted: Counter
    stale_flips: Counter
    placements: Counter
    delivery_gaps: Counter
    processing_s: Histogram
    batch_records: Histogram
    record_age_s: Histogram
    lag: Gauge
    assigned_partitions: Gauge
    progress_in: Counter
    progress_accepted: Counter
    progress_rejected: Counter  # by reason
    progress_held: Counter
    progress_holding: Gauge
    progress_replayed: Counter
    progress_learned: Counter
    speed_gpu_infos: Counter
    speeds_published: Counter
    speeds_forgotten: Counter
    learner_time_ms: Gauge
    refused: Counter  # node-sample records the identity checks dead-lettered, by reason
    gpu_samples_quarantined: Counter
    quarantined_gpus: Gauge
    gpus_forgotten: Counter

    @classmethod
    def create(cls) -> ScorerMetrics:
        r = CollectorRegistry()
        c = Counter
        rejected = _by_reason(
            "fairlane_scorer_progress_rejected",
            "job-progress records dead-lettered, by reason",
            REASONS,
            r,
        )
        unverified = c(
            "fairlane_scorer_samples_unverified",
            "node-sample records dead-lettered before reading: not signed by their node's key",
            ["reason"],
            registry=r,
        )
        for reason in SIGNATURE_REASONS:
            unverified.labels(reason)
        return cls(
            registry=r,
            records_in=c("fairlane_scorer_records_in", "node-sample records read", registry=r),
            unverified=unverified,
            dead_lettered=c(
                "fairlane_scorer_dead_lettered", "records sent to the dead-letter topic", registry=r
            ),
            duplicates=c(
                "fairlane_scorer_duplicates_ignored",
                "GPU samples not newer than the last accepted one",
                registry=r,
            ),
            scored=c("fairlane_scorer_gpu_samples_scored", "GPU samples scored", registry=r),
            emitted=c("fairlane_scorer_scores_emitted", "score records published", registry=r),
            stale_flips=c(
                "fairlane_scorer_stale_flips", "GPUs the timer announced as stale", registry=r
            ),
            placements=c(
                "fairlane_scorer_placement_events", "placement events applied per node", registry=r
            ),
            delivery_gaps=c(
                "fairlane_scorer_delivery_gaps",
                "holes in the offsets that reached the scorer (records never delivered)",
                registry=r,
            ),
            processing_s=Histogram(
                "fairlane_scorer_record_seconds",
                "processing time per node-sample record",
                registry=r,
            ),
            batch_records=Histogram(
                "fairlane_scorer_batch_records",
                "node-sample records per batch scored together",
                buckets=_BATCH_BUCKETS,
                registry=r,
            ),
            record_age_s=Histogram(
                "fairlane_scorer_record_age_seconds",
                "from a record's Kafka timestamp to the end of its processing",
                buckets=_LATENCY_BUCKETS,
                registry=r,
            ),
            lag=Gauge(
                "fairlane_scorer_consumer_lag",
                "node-sample records behind the partition's high watermark",
                ["partition"],
                registry=r,
            ),
            assigned_partitions=Gauge(
                "fairlane_scorer_assigned_partitions",
                "node-sample partitions this worker owns now",
                registry=r,
            ),
            progress_in=c(
                "fairlane_scorer_progress_records_in", "job-progress records read", registry=r
            ),
            progress_accepted=c(
                "fairlane_scorer_progress_accepted",
                "job-progress records checked against their placement and sent to the learner",
                registry=r,
            ),
            progress_rejected=rejected,
            progress_held=c(
                "fairlane_scorer_progress_held",
                "job-progress records held until their placement arrives",
                registry=r,
            ),
            progress_holding=Gauge(
                "fairlane_scorer_progress_holding",
                "job-progress records this worker holds for their placement now",
                registry=r,
            ),
            progress_replayed=c(
                "fairlane_scorer_progress_replayed",
                "progress reports the learner had learned already (redelivered)",
                registry=r,
            ),
            progress_learned=c(
                "fairlane_scorer_progress_learned",
                "progress reports the learner took in (replayed ones included)",
                registry=r,
            ),
            speed_gpu_infos=c(
                "fairlane_scorer_speed_gpu_infos",
                "GPU node, model and clock updates the learner applied",
                registry=r,
            ),
            speeds_published=c(
                "fairlane_scorer_speeds_published", "learned-speed records published", registry=r
            ),
            learner_time_ms=Gauge(
                "fairlane_scorer_learner_time_ms",
                "the newest time (epoch ms) the learner's input told of: its clock for "
                "forgetting GPUs gone from the fleet",
                registry=r,
            ),
            speeds_forgotten=c(
                "fairlane_scorer_speeds_forgotten",
                "learned speeds dropped and tombstoned: their GPU left the fleet",
                registry=r,
            ),
            refused=_by_reason(
                "fairlane_scorer_samples_refused",
                "node-sample records dead-lettered by the identity checks (future, replay, "
                "rate: whole; quarantine: the GPUs bound to another node removed; gpu_cap: "
                "the GPUs past the node's max_gpus_per_node removed), by reason",
                IDENTITY_REASONS,
                r,
            ),
            gpu_samples_quarantined=c(
                "fairlane_scorer_gpu_samples_quarantined",
                "GPU samples removed before scoring: their uuid is bound to another node",
                registry=r,
            ),
            quarantined_gpus=Gauge(
                "fairlane_scorer_quarantined_gpus",
                "GPU uuids another node than their own claimed within gpu_expire_after_s",
                registry=r,
            ),
            gpus_forgotten=c(
                "fairlane_scorer_gpus_forgotten",
                "GPUs tombstoned on the scores topic: silent for gpu_expire_after_s",
                registry=r,
            ),
        )
