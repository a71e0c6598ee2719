from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import reference_score
from fairlane_sim.fleet import FleetSimulator, FleetSpec

T0 = 1_700_000_000_000


def test_same_seed_same_records() -> None:
    spec = FleetSpec(nodes=3, seed=7)
    a, b = FleetSimulator(spec), FleetSimulator(spec)
    assert [a.sample(T0 + i) for i in range(3)] == [b.sample(T0 + i) for i in range(3)]
    assert FleetSimulator(FleetSpec(nodes=3, seed=8)).sample(T0) != a.sample(T0)


def test_one_record_per_node_with_every_gpu() -> None:
    records = FleetSimulator(FleetSpec(nodes=5, gpus_per_node=4)).sample(T0)
    assert len(records) == 5
    assert all(len(r.gpus) == 4 for r in records)
    assert len({g.uuid for r in records for g in r.gpus}) == 20


def test_fleets_of_one_seed_and_shape_on_other_nodes_share_no_gpu_uuid() -> None:
    def uuids(prefix: str) -> set[str]:
        sim = FleetSimulator(FleetSpec(nodes=2, seed=3, node_prefix=prefix))
        return {g.uuid for gpus in sim.gpus.values() for g in gpus}

    assert uuids("dash") == uuids("dash")
    assert not uuids("dash") & uuids("idle")


def test_sm_activity_only_on_gpus_with_gpm() -> None:
    sim = FleetSimulator(FleetSpec(nodes=3, models=("H100", "V100", "A100-80GB")))
    by_model = {g.model: g.sm_active for r in sim.sample(T0) for g in r.gpus}
    assert by_model["NVIDIA H100 80GB HBM3"] is not None
    assert by_model["Tesla V100-SXM2-32GB"] is None


def test_the_score_separates_degraded_gpus_from_healthy_ones() -> None:
    sim = FleetSimulator(FleetSpec(nodes=20, degraded_fraction=0.2, seed=3))
    config = ScoreConfig(interval_s=5.0)
    rounds = [sim.sample(T0 + i * 5000) for i in range(10)]
    now = T0 + 9 * 5000
    degraded = {g.uuid for gpus in sim.gpus.values() for g in gpus if g.degraded}
    assert 0 < len(degraded) < 160
    for gpu in (g for gpus in sim.gpus.values() for g in gpus):
        history = [
            (r.ts_ms, s) for rnd in rounds for r in rnd for s in r.gpus if s.uuid == gpu.uuid
        ]
        score = reference_score(history, now, config).score
        if gpu.uuid in degraded:
            assert score < config.threshold, gpu
        else:
            assert score >= 0.9, gpu
