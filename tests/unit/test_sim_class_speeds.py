"""Per-class GPU speeds: PAL's four-application table and the joint, node-wise sampler."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from fairlane_sim.class_speeds import (
    CLASSES,
    between_node_share,
    measured_class_speeds,
    read_class_speeds,
    sample_class_fleet,
    sample_class_speeds,
    spearman_rho,
    summarize_class_speeds,
)

ROOT = Path(__file__).resolve().parents[2]
PAL_DIR = ROOT.parent / "shared" / "data" / "pal_longhorn_v100"
SCRIPT = ROOT / "libs" / "sim" / "scripts" / "derive_pal_class_speeds.py"


def _node(gpu: str) -> str:
    return gpu.rsplit("-", 1)[0]


def _measured(job_class: str) -> np.ndarray:
    i = CLASSES.index(job_class)
    return np.array([s for g in measured_class_speeds() if (s := g.speeds[i]) is not None])


def test_table_has_each_class_on_its_measured_gpus() -> None:
    table = measured_class_speeds()
    assert len(table) == 384
    assert len({g.node for g in table}) == 96
    counts = {c: sum(g.speeds[i] is not None for g in table) for i, c in enumerate(CLASSES)}
    assert counts == {"resnet50": 336, "bert": 136, "pagerank": 172, "sgemm": 168}
    for g in table:
        assert g.node == _node(g.gpu)
        assert all((s is None) == (r == 0) for s, r in zip(g.speeds, g.runs, strict=True))


def test_each_class_median_gpu_is_one() -> None:
    for c in CLASSES:
        assert np.median(_measured(c)) == pytest.approx(1.0, abs=1e-4)


def test_read_class_speeds_leaves_unmeasured_classes_empty() -> None:
    text = (
        "gpu,node,resnet50_speed,resnet50_runs,bert_speed,bert_runs,"
        "pagerank_speed,pagerank_runs,sgemm_speed,sgemm_runs\n"
        "c1-2-0,c1-2,0.9,4,,0,1.01,5,,0\n"
    )
    (gpu,) = read_class_speeds(text)
    assert gpu.speeds == (0.9, None, 1.01, None)
    assert gpu.runs == (4, 0, 5, 0)


def test_sampler_is_deterministic_for_a_seed() -> None:
    a = sample_class_speeds(np.random.default_rng(7), 20, 4)
    b = sample_class_speeds(np.random.default_rng(7), 20, 4)
    c = sample_class_speeds(np.random.default_rng(8), 20, 4)
    assert a.shape == (80, len(CLASSES))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("classes", [CLASSES, ("bert",), ("sgemm", "resnet50")])
@pytest.mark.parametrize("gpus_per_node", [1, 3, 4, 6, 8])
def test_samples_are_never_nan(classes: tuple[str, ...], gpus_per_node: int) -> None:
    speeds = sample_class_speeds(np.random.default_rng(1), 200, gpus_per_node, classes)
    assert speeds.shape == (200 * gpus_per_node, len(classes))
    assert np.isfinite(speeds).all()


@pytest.mark.parametrize("gpus_per_node", [2, 4])
def test_a_simulated_node_is_one_measured_node(gpus_per_node: int) -> None:
    fleet = sample_class_fleet(np.random.default_rng(3), 300, gpus_per_node)
    for n in range(300):
        gpus = fleet.source_gpus[n * gpus_per_node : (n + 1) * gpus_per_node]
        assert len(set(gpus)) == gpus_per_node
        assert len({_node(g) for g in gpus}) == 1


def test_a_node_bigger_than_measured_ones_is_filled_from_whole_nodes() -> None:
    fleet = sample_class_fleet(np.random.default_rng(4), 300, 8)
    for n in range(0, 300 * 8, 8):
        first, second = fleet.source_gpus[n : n + 4], fleet.source_gpus[n + 4 : n + 8]
        assert len(set(first)) == len(set(second)) == 4
        assert len({_node(g) for g in first}) == len({_node(g) for g in second}) == 1


def test_a_gpu_keeps_its_measured_vector_and_imputes_only_the_rest() -> None:
    fleet = sample_class_fleet(np.random.default_rng(5), 500, 4)
    by_gpu = {g.gpu: g for g in measured_class_speeds()}
    for row, gpu in enumerate(fleet.source_gpus):
        for j, s in enumerate(by_gpu[gpu].speeds):
            assert fleet.imputed[row, j] == (s is None)
            if s is not None:
                assert fleet.speeds[row, j] == s


def test_an_imputed_node_takes_one_donor_nodes_values() -> None:
    fleet = sample_class_fleet(np.random.default_rng(6), 500, 4, ("bert",))
    donor_nodes: dict[str, set[float]] = {}
    for g in measured_class_speeds():
        if (s := g.speeds[1]) is not None:
            donor_nodes.setdefault(g.node, set()).add(s)
    assert not fleet.imputed.any()  # only nodes measured under bert are drawn
    fleet = sample_class_fleet(np.random.default_rng(6), 500, 4, ("resnet50", "bert"))
    for n in range(500):
        rows = slice(n * 4, n * 4 + 4)
        if fleet.imputed[rows, 1].all():
            values = set(fleet.speeds[rows, 1].tolist())
            assert any(values <= node for node in donor_nodes.values())


def test_marginals_match_the_measured_ones() -> None:
    speeds = sample_class_speeds(np.random.default_rng(11), 4000, 4)
    for j, c in enumerate(CLASSES):
        measured, drawn = _measured(c), speeds[:, j]
        assert set(drawn.tolist()) <= set(measured.tolist())
        assert np.median(drawn) == pytest.approx(1.0, abs=0.003)
        slower, measured_slower = np.mean(drawn * 1.05 < 1), np.mean(measured * 1.05 < 1)
        assert slower == pytest.approx(measured_slower, abs=0.015)
        grid = np.sort(measured)  # Kolmogorov-Smirnov distance between the two CDFs
        cdf_drawn = np.searchsorted(np.sort(drawn), grid, side="right") / len(drawn)
        cdf_measured = np.searchsorted(grid, grid, side="right") / len(grid)
        assert np.abs(cdf_drawn - cdf_measured).max() < 0.03


def test_imputation_invents_no_dependence_between_classes() -> None:
    fleet = sample_class_fleet(np.random.default_rng(12), 4000, 4, ("resnet50", "bert"))
    rows = fleet.imputed[:, 1] & ~fleet.imputed[:, 0]
    assert rows.sum() > 5000
    assert abs(spearman_rho(fleet.speeds[rows, 0], fleet.speeds[rows, 1])) < 0.1


def test_bad_arguments_are_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown"):
        sample_class_speeds(rng, 1, 4, ("llama",))
    with pytest.raises(ValueError, match="gpus_per_node"):
        sample_class_speeds(rng, 1, 0)
    assert sample_class_speeds(rng, 0, 4).shape == (0, len(CLASSES))


@pytest.mark.parametrize(
    ("x", "y", "rho"),
    [
        ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
        ([1, 2, 3], [1, 3, 2], 0.5),
        ([1, 1, 2], [1, 2, 3], 0.8660254),  # ties share the mean rank 1.5
    ],
)
def test_spearman_rho(x: list[float], y: list[float], rho: float) -> None:
    assert spearman_rho(x, y) == pytest.approx(rho)


@pytest.mark.parametrize(
    ("values", "nodes", "share"),
    [
        ([1.0, 1.0, 2.0, 2.0], ["a", "a", "b", "b"], 1.0),  # all variance between nodes
        ([1.0, 2.0, 1.0, 2.0], ["a", "a", "b", "b"], 0.0),  # all within
        # MSB = 2 * (0.5^2 + 0.5^2) = 1, MSW = (0.25 * 4) / 2 = 0.5, n0 = 2: s_b^2 = 0.25
        ([0.5, 1.5, 1.5, 2.5], ["a", "a", "b", "b"], 0.25 / 0.75),
    ],
)
def test_between_node_share(values: list[float], nodes: list[str], share: float) -> None:
    assert between_node_share(values, nodes) == pytest.approx(share)


def test_summary_of_the_shipped_table() -> None:
    summary = summarize_class_speeds()
    stats = {s.job_class: s for s in summary.per_class}
    assert {c: s.gpus for c, s in stats.items()} == {
        "resnet50": 336,
        "bert": 136,
        "pagerank": 172,
        "sgemm": 168,
    }
    assert stats["resnet50"].slower_5pct_share == pytest.approx(22 / 336)
    for c, s in stats.items():
        assert s.worst_speed == _measured(c).min()
        assert 0.0 <= s.between_node_share <= 1.0
    pairs = {(r.class_a, r.class_b): r for r in summary.rank_correlations}
    assert len(pairs) == 6
    assert pairs["resnet50", "bert"].gpus == 120
    assert pairs["pagerank", "sgemm"].gpus == 168
    assert all(abs(r.spearman) < 0.3 for r in pairs.values())


@pytest.mark.skipif(
    not PAL_DIR.is_dir(),
    reason=f"PAL's raw data is not here ({PAL_DIR}); only the shared workspace has it",
)
def test_derivation_reproduces_the_committed_table() -> None:
    derived = subprocess.run(
        [sys.executable, str(SCRIPT), str(PAL_DIR)], capture_output=True, check=True
    ).stdout
    committed = resources.files("fairlane_sim").joinpath("data", "pal_longhorn_class_speeds.csv")
    assert derived == committed.read_bytes()
