"""Alibaba's GPU-sharing trace of 2023 (cluster-trace-gpu-v2023, CC BY 4.0): its GPU node
list and its pods' GPU requests, as the fractional-packing study reads them.

The study uses a pod's GPU count and per-GPU share (``num_gpu``, ``gpu_milli``) and CPUs
(``cpu_milli``), and a node's GPU count, model and CPUs; host memory is not read (see
docs/evaluation.md). Pods asking no GPU (``num_gpu`` 0) are left out: they hold no GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fairlane_eval.core._csv import rows, shipped_text
from fairlane_eval.errors import ClusterError, WorkloadError
from fairlane_scheduler.core.sharing import WHOLE_MILLI, MixEntry, ShareAsk, WorkloadMix

__all__ = [
    "POD_LISTS",
    "TraceNode",
    "TracePod",
    "parse_nodes",
    "parse_pods",
    "pod_mix",
    "shipped_nodes",
    "shipped_pods",
]

_DATA = "alibaba_gpu_2023"
NODES_FILE = "openb_node_list_gpu_node.csv"
#: The trace's pod lists by name: its own, and its variant where every GPU pod shares.
POD_LISTS = {
    "default": "openb_pod_list_default.csv.gz",
    "gpushare100": "openb_pod_list_gpushare100.csv.gz",
}


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    gpus: int
    model: str
    cpu_milli: int


@dataclass(frozen=True, slots=True)
class TracePod:
    """A pod's GPU request: ``gpus`` GPUs, each ``milli`` thousandths of one (1000 when
    ``gpus > 1``: the trace shares only single-GPU pods)."""

    name: str
    gpus: int
    milli: int
    cpu_milli: int
    creation_s: int

    @property
    def is_fractional(self) -> bool:
        return self.milli < WHOLE_MILLI

    @property
    def gpu_demand(self) -> float:
        """GPUs' worth this pod asks for: ``gpus x milli / 1000``."""
        return self.gpus * self.milli / WHOLE_MILLI


def parse_nodes(text: str, source: str) -> tuple[TraceNode, ...]:
    """The nodes with GPUs of a node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    nodes = []
    for row in rows(text, ("sn", "cpu_milli", "gpu", "model"), source=source, error=ClusterError):
        gpus = row.integer("gpu")
        if gpus < 0:
            raise row.fail("gpu", f"negative: {gpus}")
        if gpus:
            nodes.append(
                TraceNode(row.text("sn"), gpus, row.text("model"), row.integer("cpu_milli"))
            )
    if not nodes:
        raise ClusterError(f"{source}: no node with a GPU")
    return tuple(nodes)


def parse_pods(text: str, source: str) -> tuple[TracePod, ...]:
    """The pods that ask for a GPU, in the file's (creation) order."""
    pods = []
    required = ("name", "cpu_milli", "num_gpu", "gpu_milli", "creation_time")
    for row in rows(text, required, source=source, error=WorkloadError):
        gpus, milli = row.integer("num_gpu"), row.integer("gpu_milli")
        if gpus == 0:
            continue
        if gpus < 0:
            raise row.fail("num_gpu", f"negative: {gpus}")
        if not 1 <= milli <= WHOLE_MILLI or (gpus > 1 and milli != WHOLE_MILLI):
            raise row.fail("gpu_milli", f"{milli} for {gpus} GPU(s): want 1..1000, 1000 if > 1")
        pods.append(
            TracePod(
                row.text("name"),
                gpus,
                milli,
                row.integer("cpu_milli"),
                row.integer("creation_time"),
            )
        )
    if not pods:
        raise WorkloadError(f"{source}: no pod asks for a GPU")
    return tuple(pods)


def pod_mix(pods: Sequence[TracePod], *, with_cpu: bool = False) -> WorkloadMix:
    """The pods' shapes weighted by how often they occur, most frequent first: FGD's
    target workload; ``with_cpu``, shapes also by their CPUs (the paper's task shapes)."""
    counts = Counter((pod.gpus, pod.milli, pod.cpu_milli if with_cpu else 0) for pod in pods)
    return WorkloadMix(
        tuple(
            MixEntry(ShareAsk(milli, cpu_milli=cpu), gpus, float(n))
            for (gpus, milli, cpu), n in counts.most_common()
        )
    )


def shipped_nodes() -> tuple[TraceNode, ...]:
    return parse_nodes(shipped_text(_DATA, NODES_FILE), NODES_FILE)


def shipped_pods(name: str = "default") -> tuple[TracePod, ...]:
    """A shipped pod list by its name in ``POD_LISTS``."""
    file = POD_LISTS[name]
    return parse_pods(shipped_text(_DATA, file), file)
