"""The scorer's Prometheus metrics, on a registry of its own (no import-time globals)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["ScorerMetrics"]


@dataclass(frozen=True)
class ScorerMetrics:
    registry: CollectorRegistry
    records_in: Counter
    dead_lettered: Counter
    duplicates: Counter
    scored: Counter
    emitted: Counter
    processing_s: Histogram

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
            processing_s=Histogram(
                "fairlane_scorer_record_seconds",
                "processing time per node-sample record",
                registry=r,
            ),
        )
