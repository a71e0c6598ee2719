"""The fractional-packing study: Alibaba's 2023 trace as shipped, the study's runs on small
hand-worked clusters, the summary over seeds and `fairlane-eval sharing` end to end."""

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fairlane_eval.__main__ import main
from fairlane_eval.core.alibaba_gpu import (
    TraceNode,
    TracePod,
    parse_nodes,
    parse_pods,
    pod_mix,
    shipped_nodes,
    shipped_pods,
)
from fairlane_eval.core.sharing_study import (
    CPU_VIEW_RULES,
    STUDY_RULES,
    StudyConfig,
    StudyRule,
    StudyRun,
    draw_arrivals,
    run_study,
)
from fairlane_eval.core.sharing_summary import summarise_study
from fairlane_eval.errors import ClusterError, WorkloadError
from fairlane_eval.sharing_command import _chosen_rules
from fairlane_scheduler.core.sharing import (
    DEFAULT_MIX,
    WHOLE_MILLI,
    MixEntry,
    ShareAsk,
    WorkloadMix,
)

HALVES = WorkloadMix((MixEntry(ShareAsk(500)),))


def pod(milli: int, gpus: int = 1, cpu_milli: int = 1000) -> TracePod:
    return TracePod(f"p{milli}x{gpus}", gpus, milli, cpu_milli, 0)


def node(gpus: int, cpu_milli: int = 64_000) -> TraceNode:
    return TraceNode(f"n{gpus}", gpus, "T4", cpu_milli)


def test_the_shipped_trace_is_alibabas_gpu_node_list_and_gpu_pods() -> None:
    nodes, pods = shipped_nodes(), shipped_pods()
    assert (len(nodes), sum(n.gpus for n in nodes)) == (1213, 6212)
    assert len(pods) == 7064  # of 8,152: the 1,088 CPU-only pods are left out
    assert sum(p.is_fractional for p in pods) == 3078
    assert all(p.is_fractional for p in shipped_pods("gpushare100"))


def test_the_schedulers_default_mix_is_the_shipped_traces_recount() -> None:
    def shapes(mix: WorkloadMix) -> list[tuple[int, int, float]]:
        return sorted((e.gpus, e.ask.milli, e.weight) for e in mix.entries)

    assert shapes(pod_mix(shipped_pods())) == shapes(DEFAULT_MIX)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli,num_gpu,gpu_milli,creation_time\np,1,x,1,0\n", "p.csv:2: num_gpu"),
        ("name,cpu_milli,num_gpu,gpu_milli,creation_time\np,1,1,0,0\n", "p.csv:2: gpu_milli"),
        ("name,cpu_milli,num_gpu,gpu_milli,creation_time\np,1,2,500,0\n", "p.csv:2: gpu_milli"),
        ("name,cpu_milli,num_gpu,creation_time\np,1,2,0\n", "missing column"),
        ("name,cpu_milli,num_gpu,gpu_milli,creation_time\np,1,0,0,0\n", "no pod asks"),
    ],
)
def test_a_bad_pod_list_names_the_line_and_field(text: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=re.escape(message)):
        parse_pods(text, "p.csv")


def test_a_node_list_keeps_the_nodes_with_gpus_and_refuses_one_without_any() -> None:
    header = "sn,cpu_milli,memory_mib,gpu,model\n"
    nodes = parse_nodes(header + "a,32000,1,0,\nb,64000,1,2,T4\n", "n.csv")
    assert nodes == (TraceNode("b", 2, "T4", 64_000),)
    with pytest.raises(ClusterError, match="no node with a GPU"):
        parse_nodes(header + "a,32000,1,0,\n", "n.csv")
    with pytest.raises(ClusterError, match=re.escape("n.csv:2: gpu")):
        parse_nodes(header + "a,32000,1,-1,\n", "n.csv")


def test_arrivals_stop_at_the_first_pod_that_reaches_the_load() -> None:
    pods = [pod(500), pod(1000, gpus=2)]
    drawn = draw_arrivals(pods, capacity_gpus=10, max_load=1.3, rng=np.random.default_rng(3))
    demand = [p.gpu_demand for p in drawn]
    assert sum(demand) >= 13 > sum(demand[:-1])


def study(
    nodes: list[TraceNode],
    arrivals: list[TracePod],
    rule: StudyRule,
    *,
    mix: WorkloadMix = HALVES,
    config: StudyConfig | None = None,
) -> StudyRun:
    config = config or StudyConfig(max_load=1.0, load_step=0.5)
    return run_study(nodes, arrivals, mix=mix, rule=rule, seed=0, config=config)


def test_fgd_keeps_a_remainder_usable_where_best_fit_strands_it() -> None:
    # 0.4 then 0.2 on one node of two GPUs: best-fit stacks 0.2 on the 0.4 (0.4 left, too
    # little for the mix's halves); FGD puts it on the free GPU (0.6 and 0.8 left).
    arrivals, config = [pod(400), pod(200)], StudyConfig(max_load=0.3, load_step=0.3)
    fgd = study([node(2)], arrivals, "fgd", config=config).points[0]
    best_fit = study([node(2)], arrivals, "best-fit", config=config).points[0]
    assert (fgd.unallocated, best_fit.unallocated) == (0.7, 0.7)
    assert (fgd.fragmented, best_fit.fragmented) == (0.0, 0.2)


def test_node_best_fit_fills_the_smallest_node_where_best_fit_fills_the_first_gpu() -> None:
    # Halves on nodes of two GPUs and one: best-fit stacks both on the first GPU of the
    # two-GPU node, so a 2-GPU pod then fails; the paper's node-level best-fit fills the
    # one-GPU node and leaves the pair free.
    arrivals, config = [pod(500), pod(500), pod(1000, gpus=2)], StudyConfig(1.0, 1.0)
    nodes = [node(2), node(1)]
    assert study(nodes, arrivals, "best-fit", config=config).points[0].failed_pods == 1
    assert study(nodes, arrivals, "node-best-fit", config=config).points[0].failed_pods == 0


def test_a_pod_without_room_fails_and_is_counted_at_every_later_load() -> None:
    # Two 2-GPU nodes: a 3-GPU pod fits on neither; a 1-GPU pod then fits.
    arrivals = [pod(1000, gpus=3), pod(1000)]
    run = study([node(2), node(2)], arrivals, "first-fit")
    assert [p.load for p in run.points] == [0.5, 1.0]
    first, last = run.points
    assert (first.failed_pods, first.failed_demand, first.unallocated) == (1, 0.75, 1.0)
    assert (last.failed_pods, last.unallocated, last.fragmented) == (1, 0.75, 0.0)


def test_with_cpus_a_pod_goes_only_where_its_cpus_are_free() -> None:
    # The first node has CPUs for one pod: the second whole pod must take the other node,
    # and a third finds no CPUs anywhere although a GPU is free.
    nodes = [node(2, cpu_milli=4000), node(1, cpu_milli=4000)]
    arrivals = [pod(1000, cpu_milli=4000)] * 3
    config = StudyConfig(max_load=1.0, load_step=1.0, pack_cpu=True)
    run = study(nodes, arrivals, "fgd", config=config)
    assert run.points[0].failed_pods == 1
    assert run.points[0].unallocated == pytest.approx(1 / 3)
    assert study(nodes, arrivals, "fgd").points[-1].failed_pods == 0


def test_fgd_with_the_cpu_view_keeps_a_large_nodes_cpus_for_the_pod_that_needs_them() -> None:
    # Halves taking 4 then 8 cores on nodes of 8 and 4: blind FGD ties and takes the first
    # node, leaving no node with 8 cores; FGD with CPUs puts the small pod on the small node.
    nodes = [node(1, cpu_milli=8000), node(1, cpu_milli=4000)]
    arrivals = [pod(500, cpu_milli=4000), pod(500, cpu_milli=8000)]
    config = StudyConfig(max_load=0.5, load_step=0.5, pack_cpu=True)
    blind = study(nodes, arrivals, "fgd", mix=pod_mix(arrivals), config=config)
    seeing = study(nodes, arrivals, "fgd-cpu", mix=pod_mix(arrivals, with_cpu=True), config=config)
    assert (blind.points[0].failed_pods, seeing.points[0].failed_pods) == (1, 0)


def test_the_paper_shapes_count_pods_by_gpus_share_and_cpus() -> None:
    arrivals = [pod(500, cpu_milli=4000), pod(500, cpu_milli=8000), pod(500, cpu_milli=8000)]
    shapes = [(e.gpus, e.ask.milli, e.ask.cpu_milli, e.weight) for e in pod_mix(arrivals).entries]
    assert shapes == [(1, 500, 0, 3.0)]
    mix = pod_mix(arrivals, with_cpu=True)
    shapes = [(e.gpus, e.ask.milli, e.ask.cpu_milli, e.weight) for e in mix.entries]
    assert shapes == [(1, 500, 8000, 2.0), (1, 500, 4000, 1.0)]


def test_random_places_shares_anywhere_with_room_the_same_way_for_a_seed() -> None:
    arrivals, config = [pod(300)] * 6, StudyConfig(max_load=0.9, load_step=0.45)
    runs = [study([node(2)], arrivals, "random", config=config).points for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0][-1].failed_pods == 0


def test_the_summary_pairs_each_rule_with_the_baseline_by_seed() -> None:
    arrivals = [pod(400), pod(200)]
    config = StudyConfig(max_load=0.3, load_step=0.3)
    runs = {
        rule: [
            run_study([node(2)], arrivals, mix=HALVES, rule=rule, seed=s, config=config)
            for s in (0, 1)
        ]
        for rule in ("fgd", "best-fit")
    }
    summary = summarise_study(runs, "best-fit")
    (fgd,) = summary["fgd"]
    assert fgd.load == 0.3
    assert fgd.fragmented.mean == 0.0
    assert summary["best-fit"][0].fragmented.mean == pytest.approx(0.2)
    assert fgd.unallocated_change.mean == 0.0
    assert fgd.unallocated_change.n == 2


def test_the_sharing_command_prints_a_table_or_json_and_writes_the_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sharing", "--seeds", "2", "--rules", "best-fit,first-fit", "--max-load", "0.4"]
    argv += ["--step", "0.2", "--out", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "default: 7064 GPU pods, 1213 nodes, 6212 GPUs" in captured.err
    assert "seed 1 first-fit" in captured.err
    assert "| load | rule |" in captured.out
    assert (tmp_path / "eval-sharing-default.png").stat().st_size > 10_000
    assert main([*argv, "--json", "--cpu", "--baseline", "first-fit"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["pack_cpu"], document["baseline"]) == (True, "first-fit")
    points = document["rules"]["first-fit"]
    assert [p["load"] for p in points] == [0.2, 0.4]
    assert points[0]["unallocated"]["seeds"] == 2
    assert (tmp_path / "eval-sharing-default-cpu.png").exists()


@pytest.mark.parametrize("cpu", [False, True])
def test_the_sharing_command_runs_fgd_with_the_cpu_view_by_default_only_with_cpus(
    cpu: bool,
) -> None:
    # The rule choice alone: a run of fgd-cpu on the whole trace takes many seconds.
    rules = _chosen_rules(argparse.Namespace(rules=None, cpu=cpu))
    assert set(rules) == set(STUDY_RULES) - (set() if cpu else set(CPU_VIEW_RULES))
    chosen = _chosen_rules(argparse.Namespace(rules=("fgd", "best-fit"), cpu=cpu))
    assert chosen == ("fgd", "best-fit")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rules", "fgd,worst-fit"], "unknown rule"),
        (["--rules", "fgd"], "baseline best-fit"),
        (["--step", "2"], "--max-load/--step"),
    ],
)
def test_the_sharing_command_refuses_bad_options_in_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sharing", "--seeds", "1", *extra]) == 2
    assert message in capsys.readouterr().err


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4),
    st.lists(st.sampled_from([50, 220, 470, 810, 1000]), min_size=1, max_size=24),
    st.sampled_from(STUDY_RULES),
    st.booleans(),
)
@example([2, 4], [470, 1000, 1000, 1000, 470, 220, 810, 810, 220, 50], "fgd", False)
def test_every_run_accounts_for_each_placed_pods_share_and_only_fills_up(
    node_gpus: list[int], shares: list[int], rule: StudyRule, pack_cpu: bool
) -> None:
    nodes = [TraceNode(f"n{i}", gpus, "T4", 8000) for i, gpus in enumerate(node_gpus)]
    capacity, arrivals = sum(node_gpus), list[TracePod]()
    for milli in shares:  # up to the pod whose demand reaches the capacity, as drawn
        # In thousandths: summed as floats, 0.47 + ... + 0.22 may fall short of 6 GPUs
        # that the study (whose checkpoints allow for that) counts as reached.
        if sum(p.gpus * p.milli for p in arrivals) < capacity * WHOLE_MILLI:
            arrivals.append(pod(milli, cpu_milli=3000))
    config = StudyConfig(max_load=1.0, load_step=0.25, pack_cpu=pack_cpu)
    run = study(nodes, arrivals, rule, mix=pod_mix(arrivals), config=config)
    demand_milli = sum(p.gpus * p.milli for p in arrivals)
    failed = run.points[-1].failed_demand if run.points else 0
    placed = demand_milli / (capacity * WHOLE_MILLI) - failed
    for point in run.points:
        assert 0 <= point.fragmented <= point.unallocated + 1e-9
        assert point.unallocated >= -1e-9
    if demand_milli >= capacity * WHOLE_MILLI:  # the last point (load 1.0), the last pod
        assert run.points[-1].unallocated == pytest.approx(1 - placed)
    unallocated = [p.unallocated for p in run.points]
    assert unallocated == sorted(unallocated, reverse=True)
