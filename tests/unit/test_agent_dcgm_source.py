"""The bridge's scrapes over real HTTP: several exporters, one that is down, one that
errs or hangs, a GPU that disappears between scrapes (tests/fakes/dcgm_exporter.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from fairlane_agent.dcgm import DcgmSource
from fairlane_agent.metrics import AgentMetrics
from tests.fakes.dcgm_exporter import (
    ExporterGpu,
    FakeExporter,
    fixture_gpus,
    h100_values,
    read_fixture,
    render,
    serve,
)
from tests.processes import free_port

T0 = 1_700_000_000_000


@pytest.fixture
def exporters() -> Iterator[tuple[FakeExporter, FakeExporter]]:
    node_2 = [ExporterGpu(i, f"GPU-n2-{i}", values=h100_values()) for i in range(4)]
    with (
        serve(read_fixture("default-counters-2xh100.prom")) as one,
        serve(render(node_2, hostname="gpu-node-2")) as two,
    ):
        yield one, two


def value(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_one_bridge_publishes_every_node_of_every_exporter(
    exporters: tuple[FakeExporter, FakeExporter],
) -> None:
    metrics = AgentMetrics.create()
    source = DcgmSource([e.url for e in exporters], metrics, timeout_s=2)
    try:
        records = source.sample(T0)
    finally:
        source.close()
    assert {r.node: len(r.gpus) for r in records} == {"gpu-node-1": 2, "gpu-node-2": 4}
    assert {r.source for r in records} == {"dcgm"}
    url = exporters[0].url
    assert value(metrics, "fairlane_agent_dcgm_exporter_up", url=url) == 1
    assert value(metrics, "fairlane_agent_dcgm_scrape_failures_total", url=url) == 0


def test_an_exporter_that_is_down_is_one_error_and_a_failure_per_round(
    exporters: tuple[FakeExporter, FakeExporter], caplog: pytest.LogCaptureFixture
) -> None:
    one, two = exporters
    dead = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    metrics = AgentMetrics.create()
    source = DcgmSource([one.url, dead, two.url], metrics, timeout_s=2)
    caplog.set_level(logging.INFO, logger="fairlane.agent.dcgm")
    try:
        rounds = [source.sample(T0 + i * 1000) for i in range(3)]
        two.stop()  # a second one goes down mid-run
        later = source.sample(T0 + 3000)
    finally:
        source.close()
    for records in rounds:
        assert sorted(r.node for r in records) == ["gpu-node-1", "gpu-node-2"]
    assert [r.node for r in later] == ["gpu-node-1"]  # the others are still published
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # once per exporter, not once per round
    assert errors[0].startswith(f"dcgm-exporter {dead} is down (ConnectError")
    assert "no samples from it meanwhile" in errors[0]
    assert value(metrics, "fairlane_agent_dcgm_scrape_failures_total", url=dead) == 4
    assert value(metrics, "fairlane_agent_dcgm_scrape_failures_total", url=two.url) == 1
    assert value(metrics, "fairlane_agent_dcgm_exporter_up", url=dead) == 0
    assert value(metrics, "fairlane_agent_dcgm_exporter_up", url=one.url) == 1


def test_an_exporter_that_comes_back_is_said_once_and_published_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fairlane.agent.dcgm")
    metrics = AgentMetrics.create()
    with serve(read_fixture("default-counters-2xh100.prom")) as exporter:
        source = DcgmSource([exporter.url], metrics, timeout_s=2)
        try:
            exporter.status = 503
            assert source.sample(T0) == source.sample(T0 + 1000) == []
            exporter.status = 200
            assert len(source.sample(T0 + 2000)) == 1
        finally:
            source.close()
    messages = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "fairlane.agent.dcgm"
    ]
    assert messages == [
        ("ERROR", f"dcgm-exporter {exporter.url} is down (HTTP 503); no samples from it meanwhile"),
        ("INFO", f"dcgm-exporter {exporter.url} is back"),
    ]
    assert value(metrics, "fairlane_agent_dcgm_scrape_failures_total", url=exporter.url) == 2


def test_text_that_is_not_an_exposition_is_a_failed_scrape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = AgentMetrics.create()
    with serve('<html><body>{"oops"</body></html>\n') as exporter:
        source = DcgmSource([exporter.url], metrics, timeout_s=2)
        try:
            assert source.sample(T0) == []
        finally:
            source.close()
    assert "not a Prometheus exposition" in caplog.text
    assert value(metrics, "fairlane_agent_dcgm_scrape_failures_total", url=exporter.url) == 1


def test_a_hung_exporter_costs_the_round_its_timeout_not_the_other_nodes(
    exporters: tuple[FakeExporter, FakeExporter],
) -> None:
    one, two = exporters
    two.delay_s = 1.5
    metrics = AgentMetrics.create()
    source = DcgmSource([one.url, two.url], metrics, timeout_s=0.3)
    try:
        records = source.sample(T0)
    finally:
        source.close()
    assert [r.node for r in records] == ["gpu-node-1"]
    assert value(metrics, "fairlane_agent_dcgm_scrape_failures_total", url=two.url) == 1


def test_a_gpu_that_disappears_between_scrapes_is_reported_unhealthy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = fixture_gpus()
    with serve(render(gpus)) as exporter:
        source = DcgmSource([exporter.url], AgentMetrics.create(), timeout_s=2)
        try:
            (before,) = source.sample(T0)
            exporter.text = render(gpus[:1])  # GPU 1 fell off the bus
            (after,) = source.sample(T0 + 1000)
        finally:
            source.close()
    assert [g.healthy for g in before.gpus] == [True, True]
    assert [(g.index, g.healthy) for g in after.gpus] == [(0, True), (1, False)]
    assert f"GPU {gpus[1].uuid} of node gpu-node-1 is gone; reported unhealthy" in caplog.text


def test_an_exporter_without_gpu_series_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with serve("# HELP go_goroutines Goroutines.\n# TYPE go_goroutines gauge\n") as exporter:
        source = DcgmSource([exporter.url], AgentMetrics.create(), timeout_s=2)
        try:
            assert source.sample(T0) == source.sample(T0 + 1000) == []
        finally:
            source.close()
    assert caplog.text.count("answered with no GPU series") == 1


def test_the_same_url_twice_is_scraped_once() -> None:
    with serve(read_fixture("default-counters-2xh100.prom")) as exporter:
        source = DcgmSource([exporter.url, exporter.url], AgentMetrics.create())
        try:
            assert len(source.sample(T0)) == 1
        finally:
            source.close()
    assert exporter.scrapes == 1
