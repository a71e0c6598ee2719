"""The client on a fractional placement: ``fairlane run --gpu-share`` asks for a share,
the child runs with the limits the scheduler's answer gives, and the PyTorch helper caps
the allocator at the share's memory fraction."""

from __future__ import annotations

import sys
import types

import pytest

from fairlane.cli import parse
from fairlane.env import node_env
from fairlane.models import PlacementRequest
from fairlane.share import MEMORY_FRACTION, limit_torch_memory, memory_fraction
from fairlane.specs import JobSpec
from tests.client_factories import placement_nodes

SHARE_ENV = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", MEMORY_FRACTION: "0.100"}


def request_of(argv: list[str]) -> PlacementRequest:
    spec = parse(argv)
    assert isinstance(spec, JobSpec)
    return spec.request


def test_gpu_share_flags_make_a_fractional_request() -> None:
    argv = ["run", "--gpus", "1", "--gpu-share", "0.25", "--gpu-memory-mib", "4096", "--", "x"]
    request = request_of(argv)
    assert (request.gpu_share, request.gpu_memory_mib) == (0.25, 4096)
    assert "gpu_share" not in request_of(["run", "--gpus", "1", "--", "x"]).model_dump(
        exclude_none=True
    )


def test_the_child_runs_with_the_share_limits_of_its_node() -> None:
    (node,) = placement_nodes(1)
    shared = node.model_copy(update={"env": SHARE_ENV})
    env = node_env("p1", [shared], shared, job_class="c", progress_socket="/s", degraded_file="/d")
    assert {k: env[k] for k in SHARE_ENV} == SHARE_ENV
    whole = node_env("p1", [node], node, job_class="c", progress_socket="/s", degraded_file="/d")
    assert MEMORY_FRACTION not in whole


def test_the_memory_fraction_is_read_and_checked() -> None:
    assert memory_fraction({}) is None
    assert memory_fraction({MEMORY_FRACTION: "0.250"}) == 0.25
    with pytest.raises(ValueError, match=MEMORY_FRACTION):
        memory_fraction({MEMORY_FRACTION: "1.5"})


def test_the_torch_helper_caps_the_allocator_only_on_a_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyTorch is not installed here: a stand-in at its call boundary records the call."""
    calls: list[tuple[float, int]] = []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        set_per_process_memory_fraction=lambda f, d: calls.append((f, d))
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert limit_torch_memory(environ={}) is None
    assert limit_torch_memory(environ={MEMORY_FRACTION: "0.125"}) == 0.125
    assert calls == [(0.125, 0)]
