"""What a simulated cluster is made of: nodes per GPU model, and GPUs per node.

``--cluster`` text is ``MODEL:NODES[xGPUS_PER_NODE]``, comma-separated:
``V100:16`` is 16 nodes of ``gpus_per_node`` (the default size) V100s;
``T4:16x4,A100-40GB:2x8`` is 16 nodes of 4 T4s and 2 nodes of 8 A100s. A model is a
catalogue key or an NVML name (read as its key).

Pure: values and text in, frozen values out.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairlane_eval.errors import ClusterError
from fairlane_events.gpu_models import CATALOG, find_model

__all__ = ["MAX_GPUS_PER_NODE", "ClusterSpec", "NodeGroup"]

#: The most GPUs a node may hold (the agent's simulator and the jobs CSV agree).
MAX_GPUS_PER_NODE = 64

#: A ``ClusterSpec.nodes`` entry: (model, nodes) at the spec's default node size, or
#: (model, nodes, GPUs per node).
NodeEntry = tuple[str, int] | tuple[str, int, int]


@dataclass(frozen=True)
class NodeGroup:
    """``nodes`` nodes of ``gpus_per_node`` GPUs of catalogue model ``model`` each."""

    model: str
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def _group(entry: NodeEntry, default_gpus_per_node: int) -> NodeGroup:
    model, nodes = entry[0], entry[1]
    per_node = entry[2] if len(entry) == 3 else default_gpus_per_node
    if model not in CATALOG:
        raise ClusterError(f"unknown GPU model {model!r}; known: {', '.join(CATALOG)}")
    if nodes < 1:
        raise ClusterError(f"{model}: nodes must be >= 1, got {nodes}")
    if not 1 <= per_node <= MAX_GPUS_PER_NODE:
        raise ClusterError(f"{model}: GPUs per node must be 1..{MAX_GPUS_PER_NODE}, got {per_node}")
    return NodeGroup(model, nodes, per_node)


@dataclass(frozen=True)
class ClusterSpec:
    """Node groups per catalogue model; an entry without its own node size has
    ``gpus_per_node`` GPUs a node. Nodes are named by the fleet, not by model."""

    nodes: tuple[NodeEntry, ...]
    gpus_per_node: int = 8  # the node size of entries that do not give one

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ClusterError("a cluster needs at least one MODEL:NODES entry")
        for entry in self.nodes:
            _group(entry, self.gpus_per_node)

    @property
    def groups(self) -> tuple[NodeGroup, ...]:
        """Each entry with its node size, in the order given."""
        return tuple(_group(entry, self.gpus_per_node) for entry in self.nodes)

    @property
    def models(self) -> tuple[str, ...]:
        """The catalogue models of the cluster, each once, in the order given."""
        return tuple(dict.fromkeys(g.model for g in self.groups))

    @property
    def node_sizes(self) -> tuple[int, ...]:
        """The distinct GPUs-per-node sizes, ascending."""
        return tuple(sorted({g.gpus_per_node for g in self.groups}))

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.groups)

    @property
    def gives_every_node_size(self) -> bool:
        """Whether every entry names its own node size (the default size applies to none)."""
        return all(len(entry) == 3 for entry in self.nodes)

    @classmethod
    def parse(cls, text: str, gpus_per_node: int = 8) -> ClusterSpec:
        """``"V100:64,P100:32"`` -> 64 V100 nodes and 32 P100 nodes of ``gpus_per_node``;
        ``"T4:16x4,A100-40GB:2x8"`` -> 16 nodes of 4 T4s and 2 nodes of 8 A100-40GBs."""
        entries: list[NodeEntry] = []
        for part in text.split(","):
            entries.append(_parse_entry(part.strip(), text))
        try:
            return cls(tuple(entries), gpus_per_node)
        except ClusterError as exc:
            raise ClusterError(f"cluster {text!r}: {exc}") from None


_SYNTAX = "expected MODEL:NODES or MODEL:NODESxGPUS_PER_NODE, comma-separated"


def _parse_entry(part: str, text: str) -> NodeEntry:
    name, colon, size = part.partition(":")
    if not colon or not name.strip():
        raise ClusterError(f"cluster {text!r}: {part!r}: {_SYNTAX}")
    spec = find_model(name.strip())
    if spec is None:
        known = ", ".join(CATALOG)
        raise ClusterError(f"cluster {text!r}: unknown GPU model {name.strip()!r}; known: {known}")
    nodes, x, per_node = size.strip().lower().partition("x")
    if not nodes.isdigit() or (x and not per_node.isdigit()):
        raise ClusterError(f"cluster {text!r}: {part!r}: {_SYNTAX}")
    if x:
        return (spec.key, int(nodes), int(per_node))
    return (spec.key, int(nodes))
