"""The DCGM-exporter bridge's I/O: scrape every exporter's ``/metrics`` each round.

Exporters are scraped in parallel (a pool of threads, from the collection loop's worker
thread), each bounded by ``timeout_s``, so one slow or dead node costs the round at most
that long and never holds back the others' records. An exporter that fails — refused,
timed out, an HTTP error, text that is not an exposition — is logged once when it goes
down and once when it is back, and every failed scrape is counted in
``fairlane_agent_dcgm_scrape_failures_total{url}``; its nodes get no records meanwhile.
Parsing and the mapping to records are pure (``fairlane_agent.core.dcgm_*``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx

from fairlane_agent.core.dcgm_bridge import DcgmBridge
from fairlane_agent.core.dcgm_exposition import DcgmGpu, read_exposition
from fairlane_agent.errors import DcgmScrapeError
from fairlane_agent.metrics import AgentMetrics
from fairlane_events.records import NodeSample

__all__ = ["DcgmSource"]

log = logging.getLogger("fairlane.agent.dcgm")

#: Parallel scrapes at most; a bridge for 1,000 nodes scrapes them in ~60 waves.
_MAX_WORKERS = 16


class DcgmSource:
    """A :class:`~fairlane_agent.sources.SampleSource` over dcgm-exporter endpoints."""

    def __init__(
        self,
        urls: Sequence[str],
        metrics: AgentMetrics,
        *,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not urls:
            raise ValueError("the dcgm backend needs at least one URL")
        self._urls = list(dict.fromkeys(urls))
        self._metrics = metrics
        self._bridge = DcgmBridge()
        self._down: dict[str, str] = {}  # url -> why, while it is down
        self._empty: set[str] = set()  # answered, but with no GPU series
        self._client = httpx.Client(
            timeout=timeout_s, transport=transport, headers={"Accept": "text/plain"}
        )
        self._pool = ThreadPoolExecutor(
            max_workers=min(_MAX_WORKERS, len(self._urls)), thread_name_prefix="dcgm-scrape"
        )
        for url in self._urls:
            metrics.dcgm_up.labels(url).set(0)
            metrics.dcgm_scrape_failures.labels(url)  # present at 0 from the start

    @property
    def urls(self) -> list[str]:
        return list(self._urls)

    def sample(self, ts_ms: int) -> list[NodeSample]:
        """One record per node of every exporter that answered, for the round at ``ts_ms``."""
        records: list[NodeSample] = []
        for url, result in zip(self._urls, self._pool.map(self._scrape, self._urls), strict=True):
            if isinstance(result, DcgmScrapeError):
                self._note_down(url, str(result))
                continue
            self._note_up(url)
            records += self._records(url, result, ts_ms)
        return records

    def _scrape(self, url: str) -> list[DcgmGpu] | DcgmScrapeError:
        """The GPUs one exporter shows, or why it could not be read (never raises)."""
        try:
            response = self._client.get(url)
            response.raise_for_status()
            return read_exposition(response.text, default_node=urlsplit(url).hostname or url)
        except httpx.HTTPStatusError as exc:
            return DcgmScrapeError(f"HTTP {exc.response.status_code}")
        except httpx.HTTPError as exc:
            return DcgmScrapeError(f"{type(exc).__name__}: {exc}".rstrip(": "))
        except DcgmScrapeError as exc:  # DcgmFormatError: the answer is not an exposition
            return exc

    def _records(self, url: str, gpus: list[DcgmGpu], ts_ms: int) -> list[NodeSample]:
        done = self._bridge.node_samples(url, gpus, ts_ms)
        for node, uuid in done.vanished:
            log.error("%s: GPU %s of node %s is gone; reported unhealthy", url, uuid, node)
        for node, uuid in done.returned:
            log.info("%s: GPU %s of node %s is back", url, uuid, node)
        for problem in done.problems:
            log.warning("%s: %s", url, problem)
        for name in done.dropped_fields:
            self._metrics.dcgm_values_dropped.labels(name).inc()
        if gpus:
            self._empty.discard(url)
        elif url not in self._empty:
            self._empty.add(url)
            log.warning("dcgm-exporter %s answered with no GPU series (is DCGM running?)", url)
        return done.records

    def _note_down(self, url: str, why: str) -> None:
        self._metrics.dcgm_scrape_failures.labels(url).inc()
        self._metrics.dcgm_up.labels(url).set(0)
        if url not in self._down:
            log.error("dcgm-exporter %s is down (%s); no samples from it meanwhile", url, why)
        self._down[url] = why

    def _note_up(self, url: str) -> None:
        self._metrics.dcgm_up.labels(url).set(1)
        if self._down.pop(url, None) is not None:
            log.info("dcgm-exporter %s is back", url)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()
