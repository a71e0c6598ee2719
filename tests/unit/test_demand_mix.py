"""The recent demand the FGD rule packs for: the trace's mix until enough requests were
seen, then the last ones' shapes by frequency, the oldest forgotten."""

from dataclasses import replace

from fairlane_scheduler.core.demand_mix import DemandMix
from fairlane_scheduler.core.sharing import DEFAULT_MIX
from tests.unit.test_learned_placement import request


def _shapes(mix: DemandMix) -> dict[tuple[int, int], float]:
    return {(e.gpus, e.ask.milli): e.weight for e in mix.mix().entries}


def test_the_trace_mix_stands_in_until_enough_requests_were_seen() -> None:
    demand = DemandMix(window=4, least=3)
    demand.see(request("a", 2))
    demand.see(replace(request("b", 1), gpu_share=0.25))
    assert demand.mix() is DEFAULT_MIX
    demand.see(replace(request("c", 1), gpu_share=0.25))
    assert _shapes(demand) == {(1, 250): 2, (2, 1000): 1}


def test_the_oldest_request_leaves_the_window() -> None:
    demand = DemandMix(window=2, least=1)
    for job, share in (("a", 0.5), ("b", 0.1), ("c", 0.1)):
        demand.see(replace(request(job, 1), gpu_share=share))
    assert _shapes(demand) == {(1, 100): 2}
