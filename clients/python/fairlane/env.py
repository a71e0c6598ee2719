"""The environment a job's process runs with: variable names and the pure function
that builds one node's environment from its placement.

Per node of the placement (one child process each):

    CUDA_VISIBLE_DEVICES     the node's GPU indices, as the scheduler chose them
    CUDA_DEVICE_ORDER        PCI_BUS_ID: the indices are NVML's (PCI bus order), which
                             CUDA's default order (fastest first) would not match on a
                             node of mixed GPUs
    MASTER_ADDR, MASTER_PORT the rank-0 node and a port unique among its live placements
    NODE_RANK, NNODES        this node's rank in the gang, and how many nodes
    WORLD_SIZE               GPUs in the whole placement (one rank per GPU)
    RANK, LOCAL_RANK         only when the node has one GPU: the child is that rank
                             (torchrun sets both for its workers itself)
    FAIRLANE_PLACEMENT_ID    the placement this job runs in
    FAIRLANE_JOB_CLASS       the job's class (``--class``), for progress records
    FAIRLANE_NODE            the node's name in the placement
    FAIRLANE_GPU_UUIDS       the node's GPU uuids, comma-separated, in CUDA_VISIBLE_DEVICES order
    FAIRLANE_PROGRESS_SOCKET the launcher's UNIX datagram socket (fairlane.progress)
    FAIRLANE_DEGRADED_FILE   where the launcher writes the slow GPUs of a degraded event

and, on a fractional placement (``--gpu-share``), what the scheduler's answer says keeps
the job inside its share (the node's ``env``: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, XLA_PYTHON_CLIENT_MEM_FRACTION, FAIRLANE_GPU_SHARE,
FAIRLANE_GPU_MEMORY_MIB, FAIRLANE_GPU_MEMORY_FRACTION; docs/fractional.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from fairlane_events.records import NodeAssignment

__all__ = [
    "DEGRADED_FILE",
    "GPU_UUIDS",
    "JOB_CLASS",
    "NODE",
    "PLACEMENT_ID",
    "PROGRESS_SOCKET",
    "first_rank",
    "node_env",
]

PLACEMENT_ID = "FAIRLANE_PLACEMENT_ID"
JOB_CLASS = "FAIRLANE_JOB_CLASS"
NODE = "FAIRLANE_NODE"
GPU_UUIDS = "FAIRLANE_GPU_UUIDS"
PROGRESS_SOCKET = "FAIRLANE_PROGRESS_SOCKET"
DEGRADED_FILE = "FAIRLANE_DEGRADED_FILE"


def first_rank(nodes: Sequence[NodeAssignment], node_rank: int) -> int:
    """The global rank of ``node_rank``'s first GPU: one rank per GPU, nodes in rank order."""
    return sum(len(n.gpus) for n in nodes if n.node_rank < node_rank)


def node_env(
    placement_id: str,
    nodes: Sequence[NodeAssignment],
    node: NodeAssignment,
    *,
    job_class: str,
    progress_socket: str,
    degraded_file: str,
    master_addr: str | None = None,
) -> dict[str, str]:
    """The variables one node's child runs with (added to the launcher's own).
    ``master_addr`` replaces the placement's rank-0 node name (e.g. 127.0.0.1 when a
    simulated fleet's node names do not resolve)."""
    env = {
        "CUDA_VISIBLE_DEVICES": node.cuda_visible_devices,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "MASTER_ADDR": master_addr or node.master_addr,
        "MASTER_PORT": str(node.master_port),
        "NODE_RANK": str(node.node_rank),
        "NNODES": str(len(nodes)),
        "WORLD_SIZE": str(node.world_size),
        PLACEMENT_ID: placement_id,
        JOB_CLASS: job_class,
        NODE: node.node,
        GPU_UUIDS: ",".join(g.uuid for g in node.gpus),
        PROGRESS_SOCKET: progress_socket,
        DEGRADED_FILE: degraded_file,
    }
    if len(node.gpus) == 1:
        env["RANK"] = str(first_rank(nodes, node.node_rank))
        env["LOCAL_RANK"] = "0"
    return {**env, **(node.env or {})}
