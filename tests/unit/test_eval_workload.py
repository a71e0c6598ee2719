"""Jobs: the documented CSV and the converters of Gavel's, Philly's and Pollux's traces."""

from __future__ import annotations

import csv
import gzip
import io
from importlib import resources

import numpy as np
import pytest

from fairlane_eval.core.throughputs import ThroughputTable, shipped_throughputs
from fairlane_eval.core.traces import (
    GAVEL_MULTI_WINDOW_S,
    GAVEL_VCS,
    PHILLY_10K_START,
    POLLUX_JOB_TYPES,
    gavel_trace_jobs,
    load_shipped_trace,
    philly_jobs,
    pollux_workload_jobs,
    shipped_traces,
)
from fairlane_eval.core.workload import (
    Job,
    WorkloadError,
    read_jobs_csv,
    split_gang,
    write_jobs_csv,
)

DATA = resources.files("fairlane_eval").joinpath("data")
HEADER = "job_id,arrival_s,gpus_per_node,nodes,job_type,work_steps"


@pytest.fixture(scope="module")
def gavel() -> ThroughputTable:
    return shipped_throughputs()


def gavel_line(job_type: str, steps: str, arrival: str, scale: str) -> str:
    return "\t".join((job_type, "cd %s && python3 train.py", "-n", "1", steps, arrival, scale))


# ---------------------------------------------------------------- the Job value


def test_gpus_is_nodes_times_gpus_per_node() -> None:
    assert Job("a", 0.0, 4, 3, "A3C", 10.0).gpus == 12


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arrival_s": -1.0}, "arrival_s: must be >= 0"),
        ({"arrival_s": float("nan")}, "arrival_s: must be >= 0"),
        ({"gpus_per_node": 0}, "gpus_per_node: must be 1..64"),
        ({"gpus_per_node": 65}, "gpus_per_node: must be 1..64"),
        ({"nodes": 0}, "nodes: must be >= 1"),
        ({"work_steps": 0.0}, "work_steps: must be > 0"),
        ({"work_steps": float("inf")}, "work_steps: must be > 0"),
        ({"job_type": ""}, "job_type: must be non-empty"),
        ({"namespace": ""}, "namespace: must be non-empty"),
    ],
)
def test_invalid_job_is_rejected(change: dict[str, object], message: str) -> None:
    values: dict[str, object] = {
        "job_id": "j", "arrival_s": 0.0, "gpus_per_node": 1, "nodes": 1, "job_type": "A3C",
        "work_steps": 1.0, **change,
    }  # fmt: skip
    with pytest.raises(WorkloadError, match=f"job 'j': {message}"):
        Job(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gpus", "per_node", "expected"),
    [(1, 8, (1, 1)), (8, 8, (8, 1)), (12, 8, (6, 2)), (16, 8, (8, 2)), (20, 8, (5, 4)),
     (7, 8, (7, 1)), (64, 8, (8, 8)), (128, 8, (8, 16)), (6, 4, (3, 2))],
)  # fmt: skip
def test_split_gang_keeps_the_gpu_count_on_fewest_even_nodes(
    gpus: int, per_node: int, expected: tuple[int, int]
) -> None:
    assert split_gang(gpus, per_node) == expected


# ---------------------------------------------------------------- the jobs CSV


def test_jobs_csv_round_trip_and_order() -> None:
    jobs = [
        Job("b", 5.0, 8, 2, "ResNet-50 (batch size 64)", 1e6, "vc1", 2),
        Job("a", 5.0, 1, 1, "A3C", 123.25),
        Job("c", 0.5, 4, 1, "LM (batch size 5)", 7.0, "vc,2"),
    ]
    text = write_jobs_csv(jobs)
    assert text.splitlines()[1] == "b,5,8,2,ResNet-50 (batch size 64),1000000,vc1,2"
    assert read_jobs_csv(text) == [jobs[2], jobs[1], jobs[0]]  # by arrival, then job_id


def test_namespace_and_priority_columns_are_optional() -> None:
    (job,) = read_jobs_csv(f"{HEADER},extra\nj1,10,2,1,A3C,50,ignored\n")
    assert job == Job("j1", 10.0, 2, 1, "A3C", 50.0, "default", 0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("j1,0,0,1,A3C,5", "jobs.csv:2: gpus_per_node: must be 1..64, got 0"),
        ("j1,0,1,1,A3C,-5", "jobs.csv:2: work_steps: must be > 0, got -5.0"),
        ("j1,soon,1,1,A3C,5", "jobs.csv:2: arrival_s: not a number: 'soon'"),
        ("j1,0,1.5,1,A3C,5", r"jobs.csv:2: gpus_per_node: not an integer: '1.5'"),
        ("j1,0,1,1,,5", "jobs.csv:2: job_type: missing value"),
        ("j1,0,1,1,A3C", "jobs.csv:2: work_steps: missing value"),
        ("j1,0,1,1,A3C,5,ns,0,surplus", r"jobs.csv:2: \(row\): more fields than the 8"),
        ("j1,0,1,1,A3C,5\nj1,1,1,1,A3C,5", "jobs.csv:3: job_id: 'j1' repeats line 2"),
    ],
)
def test_bad_jobs_csv_names_line_and_field(body: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        read_jobs_csv(f"{HEADER},namespace,priority\n{body}\n", source="jobs.csv")


def test_missing_column_is_named() -> None:
    with pytest.raises(WorkloadError, match=r"jobs.csv:1: missing column\(s\) work_steps"):
        read_jobs_csv("job_id,arrival_s,gpus_per_node,nodes,job_type\n", source="jobs.csv")


# ---------------------------------------------------------------- Gavel traces


def test_first_line_of_a_shipped_gavel_trace_becomes_its_job() -> None:
    text = gzip.decompress(DATA.joinpath("gavel_traces", "0e4a51.trace.gz").read_bytes()).decode()
    jobs = gavel_trace_jobs(text, "0e4a51")
    assert jobs[0] == Job("0e4a51-0", 0.0, 1, 1, "Transformer (batch size 128)", 95121.0, "0e4a51")
    assert len(jobs) == 1181


@pytest.mark.parametrize(
    ("scale", "gpus_per_node", "shape"),
    [("1", 8, (1, 1)), ("8", 8, (8, 1)), ("16", 8, (8, 2)), ("24", 8, (8, 3)), ("16", 4, (4, 4))],
)
def test_gavel_scale_factor_becomes_a_gang(
    scale: str, gpus_per_node: int, shape: tuple[int, int]
) -> None:
    text = gavel_line("ResNet-18 (batch size 32)", "5000", "12.5", scale)
    (job,) = gavel_trace_jobs(text, "vc", gpus_per_node=gpus_per_node, id_prefix="g")
    assert (job.job_id, job.arrival_s, job.work_steps) == ("g0", 12.5, 5000.0)
    assert (job.gpus_per_node, job.nodes) == shape


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "A3C\tcmd\t-n\t1\t100\t0.0",
            r"t.trace:2: \(line\): expected 7 tab-separated fields, got 6",
        ),
        (gavel_line("A3C", "many", "0", "1"), "t.trace:2: total_steps: not a number: 'many'"),
        (gavel_line("A3C", "100", "0", "0"), "t.trace:2: scale_factor: must be >= 1, got 0"),
        (gavel_line("A3C", "0", "0", "1"), "t.trace:2: work_steps: must be > 0"),
    ],
)
def test_bad_gavel_line_names_line_and_field(line: str, message: str) -> None:
    text = gavel_line("A3C", "100", "0", "1") + "\n" + line + "\n"
    with pytest.raises(WorkloadError, match=message):
        gavel_trace_jobs(text, "vc", source="t.trace")


# ---------------------------------------------------------------- the Philly log

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,16,47216.0,6214e9
2017-10-09 06:13:36,2759.0,3,8277.0,6214e9
2017-10-09 08:00:00,10.0,2,20.0,b436b2
"""


def test_philly_job_takes_its_traced_duration_on_the_reference(gavel: ThroughputTable) -> None:
    jobs = philly_jobs(PHILLY, gavel, np.random.default_rng(1))
    assert [j.job_id for j in jobs] == ["philly-0", "philly-1", "philly-2", "philly-3"]
    assert [j.arrival_s for j in jobs] == [0.0, 33.0, 2932.0, 6417.0]
    assert [j.namespace for j in jobs] == ["6214e9", "6214e9", "11cb48", "b436b2"]
    assert [(j.gpus_per_node, j.nodes) for j in jobs] == [(8, 2), (3, 1), (1, 1), (2, 1)]
    for job, duration in zip(jobs, (2951.0, 2759.0, 66.0, 10.0), strict=True):
        rate = gavel.steps_per_s(job.job_type, "V100", job.gpus)
        assert job.work_steps / rate == pytest.approx(duration)
    # 16 GPUs draw among the types measured at 8 (no single-GPU-only types), 3 among those at 4
    assert 8 in gavel.scale_factors(jobs[0].job_type)
    assert 4 in gavel.scale_factors(jobs[1].job_type)


def test_philly_reference_model_sets_the_work(gavel: ThroughputTable) -> None:
    (job,) = philly_jobs(PHILLY, gavel, np.random.default_rng(0), limit=1, reference_model="K80")
    assert job.work_steps / gavel.steps_per_s(job.job_type, "K80", job.gpus) == pytest.approx(2951)


def test_philly_types_are_seeded(gavel: ThroughputTable) -> None:
    def types(seed: int) -> list[str]:
        return [j.job_type for j in philly_jobs(PHILLY, gavel, np.random.default_rng(seed))]

    assert types(3) == types(3)
    assert len({tuple(types(s)) for s in range(6)}) > 1


def test_philly_window_keeps_ids_and_restarts_arrivals(gavel: ThroughputTable) -> None:
    jobs = philly_jobs(PHILLY, gavel, np.random.default_rng(0), start=1, limit=2)
    assert [(j.job_id, j.arrival_s) for j in jobs] == [("philly-1", 0.0), ("philly-2", 2899.0)]


def test_bad_philly_row_names_line_and_field(gavel: ThroughputTable) -> None:
    text = PHILLY + "yesterday,5.0,1,5.0,vc\n"
    with pytest.raises(WorkloadError, match=r"p\.csv:6: timestamp: not a date and time"):
        philly_jobs(text, gavel, np.random.default_rng(0), source="p.csv")


# ---------------------------------------------------------------- Pollux workloads

POLLUX = """name,time,application,num_replicas,batch_size
cifar10-0,107,cifar10,6,2048
ncf-2,135,ncf,1,32768
deepspeech2-3,262,deepspeech2,12,640
"""
DURATIONS = {("cifar10", 6, 2048): 900.0, ("ncf", 1, 32768): 45.0, ("deepspeech2", 12, 640): 2500.0}


def test_pollux_job_takes_its_duration_on_the_testbed_model(gavel: ThroughputTable) -> None:
    jobs = pollux_workload_jobs(POLLUX, gavel, durations=DURATIONS)
    assert [(j.job_id, j.arrival_s, j.gpus_per_node, j.nodes) for j in jobs] == [
        ("cifar10-0", 107.0, 6, 1),
        ("ncf-2", 135.0, 1, 1),
        ("deepspeech2-3", 262.0, 6, 2),
    ]
    assert [j.job_type for j in jobs] == [
        "ResNet-18 (batch size 256)",
        "Recommendation (batch size 8192)",
        "LM (batch size 40)",
    ]
    for job, duration in zip(jobs, (900.0, 45.0, 2500.0), strict=True):
        assert job.work_steps / gavel.steps_per_s(job.job_type, "T4", job.gpus) == pytest.approx(
            duration
        )


def test_pollux_defaults_to_the_shipped_durations(gavel: ThroughputTable) -> None:
    (job,) = pollux_workload_jobs(POLLUX.splitlines()[0] + "\nc,0,cifar10,8,2048\n", gavel)
    rate = gavel.steps_per_s("ResNet-18 (batch size 256)", "T4", 8)
    assert job.work_steps / rate == pytest.approx(868.99, abs=0.01)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,1,gpt,4,64", "w.csv:2: application: unknown 'gpt'"),
        (
            "x,1,cifar10,6,999",
            r"w.csv:2: batch_size: no measured duration for \('cifar10', 6, 999\)",
        ),
    ],
)
def test_bad_pollux_row_names_line_and_field(
    gavel: ThroughputTable, row: str, message: str
) -> None:
    text = POLLUX.splitlines()[0] + "\n" + row + "\n"
    with pytest.raises(WorkloadError, match=message):
        pollux_workload_jobs(text, gavel, durations=DURATIONS, source="w.csv")


def test_every_pollux_application_maps_to_a_measured_gavel_type(gavel: ThroughputTable) -> None:
    assert set(POLLUX_JOB_TYPES.values()) <= set(gavel.job_types())


# ---------------------------------------------------------------- shipped traces

EXPECTED_JOBS = {
    "gavel-0e4a51": 1181, "gavel-103959": 986, "gavel-11cb48": 2000, "gavel-23dbec": 9,
    "gavel-2869ce": 533, "gavel-51b7ef": 18, "gavel-6214e9": 2000, "gavel-6c71a0": 2000,
    "gavel-795a4c": 3, "gavel-7f04ca": 972, "gavel-925e2b": 4, "gavel-b436b2": 2000,
    "gavel-e13805": 607, "gavel-ed69ec": 951, "gavel-ee9e8c": 2000, "gavel-multi": 4889,
    "philly-10k": 10_000, **{f"pollux-workload-{n}": 160 for n in range(1, 9)},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED_JOBS))
def test_shipped_trace_loads_with_types_the_table_knows(name: str, gavel: ThroughputTable) -> None:
    jobs = load_shipped_trace(name, gavel, seed=0)
    assert len(jobs) == EXPECTED_JOBS[name]
    assert len({j.job_id for j in jobs}) == len(jobs)
    assert jobs == sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
    assert all(gavel.steps_per_s(t, "V100", 1) > 0 for t in {j.job_type for j in jobs})


def test_shipped_names_are_the_expected_ones() -> None:
    assert set(shipped_traces()) == set(EXPECTED_JOBS)
    with pytest.raises(WorkloadError, match="unknown trace 'gavel-zz'"):
        load_shipped_trace("gavel-zz", shipped_throughputs(), 0)


def test_every_gavel_vc_file_is_shipped() -> None:
    files = {p.name for p in DATA.joinpath("gavel_traces").iterdir()}
    assert files == {f"{vc}.trace.gz" for vc in GAVEL_VCS}


def test_gavel_multi_is_every_vc_within_the_window(gavel: ThroughputTable) -> None:
    jobs = load_shipped_trace("gavel-multi", gavel, seed=0)
    assert {j.namespace for j in jobs} == set(GAVEL_VCS)
    assert max(j.arrival_s for j in jobs) < GAVEL_MULTI_WINDOW_S
    # the window ends before any VC's trace was cut at 2,000 jobs
    capped = [vc for vc in GAVEL_VCS if len(load_shipped_trace(f"gavel-{vc}", gavel, 0)) == 2000]
    assert all(
        load_shipped_trace(f"gavel-{vc}", gavel, 0)[-1].arrival_s >= GAVEL_MULTI_WINDOW_S * 0.999
        for vc in capped
    )


def test_philly_10k_starts_on_2017_10_02_and_is_seeded(gavel: ThroughputTable) -> None:
    text = gzip.decompress(DATA.joinpath("pollux", "philly.csv.gz").read_bytes()).decode()
    stamps = sorted(row["timestamp"] for row in csv.DictReader(io.StringIO(text)))
    assert stamps[PHILLY_10K_START - 1] < "2017-10-02" <= stamps[PHILLY_10K_START]
    a, b = (load_shipped_trace("philly-10k", gavel, seed=s) for s in (1, 1))
    assert a == b
    assert a[0].job_id == f"philly-{PHILLY_10K_START}"
    assert a != load_shipped_trace("philly-10k", gavel, seed=2)


def test_shipped_trace_fits_the_node_size_asked(gavel: ThroughputTable) -> None:
    on_8 = load_shipped_trace("pollux-workload-6", gavel, 0)
    on_4 = load_shipped_trace("pollux-workload-6", gavel, 0, gpus_per_node=4)
    assert max(j.gpus_per_node for j in on_4) == 4
    assert [j.gpus for j in on_4] == [j.gpus for j in on_8]
