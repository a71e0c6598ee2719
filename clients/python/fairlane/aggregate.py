"""A window of step timings, per rank, turned into one ``JobProgress`` record (pure).

Each rank's step sample names its node and local rank; the GPU is the one at that
position of its node's assignment (the order of CUDA_VISIBLE_DEVICES), never guessed:
a sample that names no GPU of the placement is dropped and counted. The rank reported
is ``first rank of the node + local rank`` (one rank per GPU, nodes in rank order), so
two ranks can never claim one rank number.

Per window (docs/launcher.md):

    compute_s_per_step(rank) = median of the rank's timed sections in the window
    steps(rank)              = how many it timed
    steps_per_s              = max over ranks of steps / window_s

The median, not the mean: one step that waited on a checkpoint or a page fault must not
make a GPU look slow. The job's rate takes the busiest rank, since a synchronous job's
ranks step together and a rank that times no section (a data loader) must not drag it.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairlane._wire import StepSample, decode_step
from fairlane.env import first_rank
from fairlane_events.records import JobProgress, NodeAssignment, RankProgress

__all__ = ["MAX_STEP_S", "ProgressWindow", "weighted_median"]

#: The longest step a progress record may state (its schema's bound).
MAX_STEP_S = 86_400.0


def weighted_median(values: Sequence[tuple[float, int]]) -> float:
    """The median of the multiset holding each ``value`` ``count`` times, as
    :func:`statistics.median` gives it (the mean of the two middle ones for an even size),
    without building the multiset."""
    ordered = sorted(values)
    total = sum(n for _, n in ordered)
    lower, upper = (total - 1) // 2, total // 2  # 0-based positions of the middle
    found: list[float] = []
    seen = 0
    for value, count in ordered:
        seen += count
        while len(found) < 2 and seen > (lower, upper)[len(found)]:
            found.append(value)
    return (found[0] + found[1]) / 2


class ProgressWindow:
    """Collects step samples for one placement; :meth:`close` ends the window."""

    def __init__(self, nodes: Sequence[NodeAssignment]) -> None:
        self._nodes = {n.node_rank: n for n in nodes}
        self._first = {n.node_rank: first_rank(nodes, n.node_rank) for n in nodes}
        self._timings: dict[int, list[tuple[float, int]]] = {}
        self._uuids: dict[int, str] = {}
        self.dropped = 0

    def _locate(self, sample: StepSample) -> tuple[int, str] | None:
        """(rank, GPU uuid) of the sample, or None when it names no GPU of the placement."""
        node = self._nodes.get(sample.node_rank)
        if node is None:
            return None
        first = self._first[sample.node_rank]
        local = sample.local_rank
        if local is None and sample.rank is not None:
            local = sample.rank - first
        if local is None and len(node.gpus) == 1:
            local = 0
        if local is None or not 0 <= local < len(node.gpus):
            return None
        return first + local, node.gpus[local].uuid

    def add(self, sample: StepSample) -> bool:
        """Count one timed step; False (and counted in ``dropped``) when it cannot be placed."""
        located = self._locate(sample) if 0 < sample.compute_s <= MAX_STEP_S else None
        if located is None:
            self.dropped += 1
            return False
        rank, uuid = located
        self._timings.setdefault(rank, []).append((sample.compute_s, sample.steps))
        self._uuids[rank] = uuid
        return True

    def add_datagram(self, data: bytes) -> bool:
        """:meth:`add` one rank's datagram; a malformed one is dropped and counted too."""
        sample = decode_step(data)
        if sample is None:
            self.dropped += 1
            return False
        return self.add(sample)

    def close(
        self, *, placement_id: str, job_class: str, end_ms: int, window_s: float
    ) -> JobProgress | None:
        """The window's record (None when no rank timed a step), and a fresh window."""
        timings, self._timings = self._timings, {}
        if not timings or window_s <= 0:
            return None
        ranks = [
            RankProgress(
                rank=rank,
                uuid=self._uuids[rank],
                compute_s_per_step=weighted_median(values),
                steps=sum(n for _, n in values),
            )
            for rank, values in sorted(timings.items())
        ]
        return JobProgress(
            schema_="job-progress/1",
            placement_id=placement_id,
            job_class=job_class,
            ts_ms=end_ms,
            window_s=min(window_s, MAX_STEP_S),
            steps_per_s=max(r.steps for r in ranks) / window_s,
            ranks=ranks,
        )
