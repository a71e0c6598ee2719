"""Assembling a placement from a choice (core/placements.py ``assemble``): per node its
GPUs by index, CUDA_VISIBLE_DEVICES, NODE_RANK in choice order, WORLD_SIZE, the master
node's address and port, and what each GPU scored and is."""

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import Choice, NodeChoice
from fairlane_scheduler.core.placements import PlacementRequest, assemble
from tests.factories import gpu_score

NOW = 1_700_000_000_000


def test_a_gang_is_assembled_by_gpu_index_with_its_rank_world_and_master() -> None:
    fleet = FleetView()
    for node, index, score, model in (
        ("a", 3, 0.9, "NVIDIA H100 80GB HBM3"),
        ("a", 1, 0.8, "NVIDIA H100 80GB HBM3"),
        ("b", 0, 0.7, "NVIDIA A100-SXM4-40GB"),
    ):
        fleet.apply(
            gpu_score(node=node, uuid=f"{node}{index}", index=index, score=score, model=model)
        )
    request = PlacementRequest("job", "ns", 2, None, None, "f" * 64, lease_s=1.5, nodes=2)
    choice = Choice((NodeChoice("a", (0, 1)), NodeChoice("b", (2,))), min_capacity=0.7)
    placed = assemble(request, fleet, choice, port=29501, placement_id="p1", now_ms=NOW)
    a, b = placed.nodes
    assert [(g.uuid, g.index) for g in a.gpus] == [("a1", 1), ("a3", 3)]  # by index
    assert (a.cuda_visible_devices, b.cuda_visible_devices) == ("1,3", "0")
    assert [(n.node, n.node_rank, n.world_size) for n in placed.nodes] == [
        ("a", 0, 3),
        ("b", 1, 3),
    ]
    assert {(n.master_addr, n.master_port) for n in placed.nodes} == {("a", 29501)}
    assert placed.gpu_scores == {"a3": 0.9, "a1": 0.8, "b0": 0.7}
    assert placed.gpu_models == {"a3": "H100", "a1": "H100", "b0": "A100-40GB"}
    assert (placed.id, placed.state, placed.lease_expires_at_ms) == ("p1", "placed", NOW + 1500)
