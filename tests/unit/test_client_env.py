"""What each node's child runs with, built from its placement alone."""

from fairlane.env import DEGRADED_FILE, GPU_UUIDS, PROGRESS_SOCKET, first_rank, node_env
from tests.client_factories import placement_nodes


def test_each_node_gets_its_devices_rank_and_the_gang_wide_values() -> None:
    nodes = placement_nodes(2, 2)
    env = node_env("p1", nodes, nodes[1], job_class="llm", progress_socket="/s", degraded_file="/d")
    assert env == {
        "CUDA_VISIBLE_DEVICES": "2,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "MASTER_ADDR": "n0",
        "MASTER_PORT": "29500",
        "NODE_RANK": "1",
        "NNODES": "2",
        "WORLD_SIZE": "4",
        "FAIRLANE_PLACEMENT_ID": "p1",
        "FAIRLANE_JOB_CLASS": "llm",
        "FAIRLANE_NODE": "n1",
        GPU_UUIDS: "G1-0,G1-1",
        PROGRESS_SOCKET: "/s",
        DEGRADED_FILE: "/d",
    }


def test_a_one_gpu_node_is_one_rank_and_says_which() -> None:
    nodes = placement_nodes(1, 1, 1)
    env = node_env(
        "p1",
        nodes,
        nodes[2],
        job_class="c",
        progress_socket="/s",
        degraded_file="/d",
        master_addr="127.0.0.1",
    )
    assert (env["RANK"], env["LOCAL_RANK"], env["MASTER_ADDR"]) == ("2", "0", "127.0.0.1")


def test_ranks_follow_node_rank_order_one_per_gpu() -> None:
    nodes = placement_nodes(4, 2, 8)
    assert [first_rank(nodes, n.node_rank) for n in nodes] == [0, 4, 6]
