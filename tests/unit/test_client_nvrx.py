"""nvidia-resiliency-ext's straggler Report to compute seconds per step. The package is
not installed here: the report is built with the real ``Report``'s fields and its
``Statistic`` member names (nvidia_resiliency_ext/straggler/reporting.py, statistics.py)."""

import enum
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fairlane import nvrx
from fairlane._wire import decode_step
from fairlane.progress import Reporter


class Statistic(enum.Enum):
    """The names of NVRx's ``straggler.Statistic``."""

    MIN = enum.auto()
    MAX = enum.auto()
    MED = enum.auto()
    AVG = enum.auto()
    STD = enum.auto()
    NUM = enum.auto()


@dataclass(frozen=True)
class Report:
    """The fields of NVRx's ``straggler.Report``."""

    gpu_relative_perf_scores: Mapping[int, float] = field(default_factory=dict)
    section_relative_perf_scores: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    gpu_individual_perf_scores: Mapping[int, float] = field(default_factory=dict)
    section_individual_perf_scores: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    rank_to_node: Mapping[int, str] = field(default_factory=dict)
    local_section_summaries: Mapping[str, Any] = field(default_factory=dict)
    local_kernel_summaries: Mapping[str, Any] = field(default_factory=dict)
    generate_report_elapsed_time: float = 0.0
    gather_on_rank0: bool = False
    rank: int | None = 3


def stats(med: float, num: int) -> dict[Statistic, float]:
    return {Statistic.MED: med, Statistic.AVG: med * 1.1, Statistic.NUM: num}


REPORT = Report(
    local_section_summaries={"step": stats(900.0, 4)},
    local_kernel_summaries={
        "ampere_sgemm_128x64_nn": stats(50.0, 8),  # two per step: 100 ms a step
        "elementwise_kernel": stats(5.0, 4),  # one per step: 5 ms
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": stats(400.0, 4),  # a wait: left out
    },
)


def test_kernel_time_per_profiled_step_leaves_collectives_out() -> None:
    found = nvrx.compute_s_per_step(REPORT, "step")
    assert found is not None
    compute_s, steps = found
    assert compute_s == pytest.approx((50 * 8 + 5 * 4) / 4 / 1000)
    assert steps == 4


def test_a_report_without_the_section_or_kernels_gives_nothing() -> None:
    assert nvrx.compute_s_per_step(REPORT, "other") is None
    assert nvrx.compute_s_per_step(Report(), "step") is None
    only_waits = Report(
        local_section_summaries={"step": stats(1.0, 2)},
        local_kernel_summaries={"ncclKernel_AllGather": stats(3.0, 2)},
    )
    assert nvrx.compute_s_per_step(only_waits, "step") is None


def test_report_sends_the_steps_to_the_launcher(tmp_path: Path) -> None:
    path = str(tmp_path / "p.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        assert nvrx.report(REPORT, "step", reporter=Reporter(path, local_rank=3))
        sample = decode_step(sock.recv(512))
    assert sample is not None
    assert (sample.local_rank, sample.steps) == (3, 4)
    assert sample.compute_s == pytest.approx(0.105)


def test_the_missing_package_is_named_with_how_to_get_it() -> None:
    with pytest.raises(nvrx.NvrxMissingError, match="pip install nvidia-resiliency-ext"):
        nvrx.detector()
