"""The live run's result, and its comparison with the offline simulator's prediction:
the table ``make eval-live`` prints and the JSON it writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fairlane_eval.core.agreement import Agreement, agreement
from fairlane_eval.core.live_prediction import (
    LiveSetup,
    Placed,
    predict,
    same_choices,
    throttled_share,
)

FAIRLANE_POLICY = "fairlane-fastest"  # the offline policy the live scheduler is compared with


@dataclass(frozen=True)
class LiveResult:
    setup: LiveSetup  # as run: its fleet carries the run's node prefix
    t0_ms: int  # the agent's first sample: scenario time 0
    fairlane: tuple[Placed, ...]
    static: tuple[Placed, ...]
    queued: int  # Fairlane requests that waited (202) before they were placed
    wall_s: float


def compare(result: LiveResult, seeds: Sequence[int]) -> tuple[Agreement, Agreement]:
    """(Fairlane, static): the live shares against the simulator's for the same run."""
    setup = result.setup
    fleet = setup.hidden_fleet()
    fairlane = throttled_share(fleet, result.fairlane)
    static = throttled_share(fleet, result.static)
    return (
        agreement(fairlane, predict(setup, FAIRLANE_POLICY, seeds)),
        agreement(static, predict(setup, "static", seeds[:1])),  # deterministic
    )


def format_report(result: LiveResult, agreements: tuple[Agreement, Agreement]) -> str:
    """The table ``make eval-live`` prints: live share, its interval, the prediction."""
    setup, spec = result.setup, result.setup.fleet
    lines = [
        f"live run {setup.name!r}: {spec.nodes} nodes x {spec.gpus_per_node} GPUs "
        f"({', '.join(spec.models)}), fleet seed {spec.seed}, {len(setup.jobs)} jobs, "
        f"interval {setup.interval_s:g} s, threshold {setup.score.threshold:g}, "
        f"stabilization {setup.stabilization_s:g} s, wall {result.wall_s / 60:.1f} min",
        "placements that started on a GPU the scenario was throttling:",
        f"  {'policy':<17} {'live':<16} {'95% interval':<16} {'predicted (seeds)':<26} agrees",
    ]
    for a in agreements:
        low, high = a.interval
        p_low, p_high = a.predicted.share_range
        live = f"{a.live.on_throttled}/{a.live.placements} = {a.live.share:.3f}"
        predicted = f"{a.predicted.share:.3f} ({p_low:.3f}-{p_high:.3f}, {len(a.predicted.seeds)})"
        verdict = "yes" if a.agrees else "NO"
        lines.append(
            f"  {a.policy:<17} {live:<16} [{low:.3f}, {high:.3f}]   {predicted:<26} {verdict}"
        )
    for a, live_placed in zip(agreements, (result.fairlane, result.static), strict=True):
        runs = len(a.predicted.shares)
        gpus = sum(s.gpus for s in a.predicted.shares) / runs
        hit = sum(s.gpus_on_throttled for s in a.predicted.shares) / runs
        same = same_choices(live_placed, a.predicted.placed[0])
        lines.append(
            f"  {a.policy}: GPUs on throttled {a.live.gpus_on_throttled}/{a.live.gpus} live, "
            f"{hit:.1f}/{gpus:.1f} predicted; {same} of {a.live.placements} jobs on the "
            f"same GPUs as offline seed {a.predicted.seeds[0]}"
        )
    lines.append(f"  Fairlane requests that queued: {result.queued}")
    return "\n".join(lines)


def as_json(result: LiveResult, agreements: tuple[Agreement, Agreement]) -> dict[str, Any]:
    return {
        "setup": result.setup.name,
        "fleet_seed": result.setup.fleet.seed,
        "jobs": len(result.setup.jobs),
        "wall_s": round(result.wall_s, 1),
        "queued": result.queued,
        "policies": {
            a.policy: {
                "live": dataclasses.asdict(a.live),
                "live_share": a.live.share,
                "interval": list(a.interval),
                "predicted_share": a.predicted.share,
                "predicted_by_seed": [s.share for s in a.predicted.shares],
                "agrees": a.agrees,
                "placements": [[p.job_id, round(p.start_s, 3), list(p.rows)] for p in placed],
            }
            for a, placed in zip(agreements, (result.fairlane, result.static), strict=True)
        },
    }
