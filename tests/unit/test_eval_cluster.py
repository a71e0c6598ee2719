"""The simulated cluster's description: ``--cluster`` text, node sizes per model, the fleet."""

from __future__ import annotations

from collections import Counter

import pytest

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.cluster_spec import ClusterSpec, NodeGroup
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import Variability
from fairlane_eval.errors import ClusterError

EVEN: Variability = {None: (1.0,)}


@pytest.mark.parametrize(
    ("text", "gpus_per_node", "groups"),
    [
        ("V100:16", 8, [NodeGroup("V100", 16, 8)]),
        ("V100:16", 4, [NodeGroup("V100", 16, 4)]),
        (
            "T4:16x4,A100-40GB:2x8",
            8,
            [NodeGroup("T4", 16, 4), NodeGroup("A100-40GB", 2, 8)],
        ),
        ("V100:4, P100:2x2", 8, [NodeGroup("V100", 4, 8), NodeGroup("P100", 2, 2)]),
        ("V100:2X4", 8, [NodeGroup("V100", 2, 4)]),
        ("Tesla V100-SXM2-32GB:3x2", 8, [NodeGroup("V100", 3, 2)]),  # an NVML name
    ],
)
def test_cluster_text_gives_nodes_of_each_model_and_size(
    text: str, gpus_per_node: int, groups: list[NodeGroup]
) -> None:
    spec = ClusterSpec.parse(text, gpus_per_node)
    assert list(spec.groups) == groups
    assert spec.gpus == sum(g.nodes * g.gpus_per_node for g in groups)


def test_a_cluster_knows_its_models_and_node_sizes() -> None:
    spec = ClusterSpec.parse("T4:16x4,A100-40GB:2x8,T4:1x2")
    assert spec.models == ("T4", "A100-40GB")
    assert spec.node_sizes == (2, 4, 8)
    assert spec.gpus == 64 + 16 + 2
    assert spec.gives_every_node_size
    assert not ClusterSpec.parse("T4:16x4,V100:2").gives_every_node_size


def test_the_old_two_field_form_still_builds_a_cluster() -> None:
    assert ClusterSpec((("V100", 3), ("A100-80GB", 1))).gpus == 32
    assert ClusterSpec((("V100", 3, 4), ("A100-80GB", 1)), 2).gpus == 14


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("V100", "expected MODEL:NODES or MODEL:NODESxGPUS_PER_NODE"),
        ("V100:", "expected MODEL:NODES"),
        (":4", "expected MODEL:NODES"),
        ("V100:x4", "expected MODEL:NODES"),
        ("V100:2x", "expected MODEL:NODES"),
        ("V100:2x4x4", "expected MODEL:NODES"),
        ("V100:-1", "expected MODEL:NODES"),
        ("V100:0", "V100: nodes must be >= 1, got 0"),
        ("V100:2x0", "V100: GPUs per node must be 1..64, got 0"),
        ("V100:2x65", "V100: GPUs per node must be 1..64, got 65"),
        ("V100:2,", "expected MODEL:NODES"),
        ("Quadro:2", "unknown GPU model 'Quadro'; known: K80"),
    ],
)
def test_a_bad_cluster_says_which_entry_and_why(text: str, message: str) -> None:
    with pytest.raises(ClusterError, match=f"cluster {text!r}: .*{message}"):
        ClusterSpec.parse(text)


def test_a_bad_cluster_is_a_value_error_too() -> None:
    with pytest.raises(ValueError, match="unknown GPU model"):
        ClusterSpec((("NOPE", 1),))


def test_the_fleet_has_each_models_nodes_at_that_models_size() -> None:
    spec = ClusterSpec.parse("T4:3x4,A100-40GB:2x8")
    fleet = HiddenFleet.build(spec, EVEN, FaultModel(rate_scale=0.0), 3600.0, seed=1)
    per_node = Counter((g.node, g.spec.key) for g in fleet.gpus)
    assert sorted(Counter(per_node.values()).items()) == [(4, 3), (8, 2)]
    assert {size for (_, model), size in per_node.items() if model == "T4"} == {4}
    assert set(fleet.groups()) == {NodeGroup("A100-40GB", 2, 8), NodeGroup("T4", 3, 4)}


def test_a_size_given_per_entry_draws_the_same_fleet_as_the_default_size() -> None:
    faults = FaultModel(rate_scale=4.0)
    a = HiddenFleet.build(ClusterSpec((("V100", 3), ("K80", 2))), EVEN, faults, 86_400.0, 7)
    b = HiddenFleet.build(ClusterSpec.parse("V100:3x8,K80:2x8"), EVEN, faults, 86_400.0, 7)
    assert a.gpus == b.gpus
    assert a.episodes == b.episodes
