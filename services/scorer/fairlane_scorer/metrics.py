"""The scorer's Prometheus metrics, on a registry of its own (no import-time globals)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ScorerMetrics"]

_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class ScorerMetrics:
    registry: CollectorRegistry
    records_in: Counter
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

    @classmethod
    def create(cls) -> ScorerMetrics:
        r = CollectorRegistry()
        c = Counter
        return cls(
            registry=r,
            records_in=c("fairlane_scorer_records_in", "node-sample records read", registry=r),
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
        )
