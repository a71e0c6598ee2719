"""The agent's Prometheus metrics, on a registry of its own (one per agent instance)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["AgentMetrics"]


@dataclass(frozen=True)
class AgentMetrics:
    registry: CollectorRegistry
    samples_read: Counter
    published: Counter
    buffered: Gauge
    dropped: Counter
    nvml_errors: Counter
    publish_s: Histogram
    last_round_ts: Gauge
    placements_skipped: Counter
    dcgm_scrape_failures: Counter
    dcgm_up: Gauge
    dcgm_values_dropped: Counter
    kafka_refused: Counter

    @classmethod
    def create(cls) -> AgentMetrics:
        r = CollectorRegistry()
        return cls(
            registry=r,
            kafka_refused=Counter(
                "fairlane_agent_kafka_refused",
                "sends Kafka refused to this principal (ACL, authentication): fix its grants",
                registry=r,
            ),
            samples_read=Counter(
                "fairlane_agent_samples_read", "node samples collected", registry=r
            ),
            published=Counter(
                "fairlane_agent_samples_published", "node samples acknowledged by Kafka", registry=r
            ),
            buffered=Gauge(
                "fairlane_agent_samples_buffered", "node samples waiting for Kafka", registry=r
            ),
            dropped=Counter(
                "fairlane_agent_samples_dropped",
                "node samples never delivered, oldest first",
                ["reason"],  # overflow | expired | shutdown
                registry=r,
            ),
            nvml_errors=Counter(
                "fairlane_agent_nvml_errors", "NVML errors by kind", ["kind"], registry=r
            ),
            publish_s=Histogram(
                "fairlane_agent_publish_seconds", "time to send one batch to Kafka", registry=r
            ),
            last_round_ts=Gauge(
                "fairlane_agent_last_round_timestamp_seconds",
                "when the last collection round ended",
                registry=r,
            ),
            placements_skipped=Counter(
                "fairlane_agent_placements_skipped",
                "placement records the simulator could not decode",
                registry=r,
            ),
            dcgm_scrape_failures=Counter(
                "fairlane_agent_dcgm_scrape_failures",
                "dcgm-exporter scrapes that failed (refused, timed out, HTTP error, not text)",
                ["url"],
                registry=r,
            ),
            dcgm_up=Gauge(
                "fairlane_agent_dcgm_exporter_up",
                "1 if the last scrape of this dcgm-exporter succeeded",
                ["url"],
                registry=r,
            ),
            dcgm_values_dropped=Counter(
                "fairlane_agent_dcgm_values_dropped",
                "dcgm-exporter values outside the record's range, published as null",
                ["field"],
                registry=r,
            ),
        )
