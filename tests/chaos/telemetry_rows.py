"""The rows of telemetry that lies (issue 35; the pass they share is telemetry.py): each
gives its figure and holds it to its bound. Forged and colliding samples: every one
dead-lettered with its reason and counted, no score under the liar's name nor of a
lie's time, no degraded event. The replay: dead-lettered, never scored again. The
flood: refused but for one sample a second of its sample time, the scorer caught up
within 30 s with its memory up by less than 50 MiB, every other node scored meanwhile
(docs/security.md, "Node identity"; docs/reliability.md)."""

from __future__ import annotations

import time

from tests.chaos.context import Context
from tests.chaos.report import Row
from tests.chaos.telemetry import (
    FLOOD,
    FLOOD_RECORDS,
    FLOOD_STEP_MS,
    FORGED,
    FORGED_UNSIGNED,
    REFUSED,
    ROGUE,
    SPACING_MS,
    UNVERIFIED,
    Attack,
    attack,
    labelled,
)

__all__ = ["flood", "forged_node", "replay", "uuid_collision"]

MAX_RECOVERY_S = 30.0
MAX_RSS_GROWTH_MIB = 50.0


def _targets(a: Attack) -> str:
    nodes = sorted(set(a.targets.values()))
    return f"the {len(a.targets)} GPUs of {', '.join(nodes)} (held by the load), busy and hot"


def _untouched(row: Row, a: Attack, liar: str) -> None:
    """The lies changed nothing downstream: no score under the liar's name, no score of
    a targeted GPU from a lie, no degraded event naming one by a score its own node never
    reported (the load may throttle a held GPU for real meanwhile)."""
    row.check(a.scores_of(liar) == 0, f"{a.scores_of(liar)} score records under {liar!r}")
    row.check(a.scores_changed == 0, f"{a.scores_changed} score records of targeted GPUs changed")
    events = ", ".join(e.placement_id for e in a.degraded)
    row.check(not a.degraded, f"degraded events naming a targeted GPU: {events}")


def forged_node(ctx: Context) -> Row:
    row = Row("Forged node")
    before = ctx.loads()
    a = attack(ctx)
    sent, dead = len(a.forged), a.lettered(a.forged, "signature")
    missing = a.delta(labelled(UNVERIFIED, reason="missing"))
    mismatch = a.delta(labelled(UNVERIFIED, reason="mismatch"))
    row.injected = (
        f"{sent} samples of {FORGED!r} naming {_targets(a)}: {FORGED_UNSIGNED} unsigned, "
        "1 signed with another cluster's ring"
    )
    row.notes.append(
        f"records sent {sent} / dead-lettered {dead} / scores changed {a.scores_changed} / "
        f"degraded events {len(a.degraded)}; counted unverified: missing +{missing:.0f}, "
        f"mismatch +{mismatch:.0f}"
    )
    row.check(dead == sent, f"{sent - dead} forged samples not dead-lettered as 'signature'")
    row.check(
        (missing, mismatch) == (FORGED_UNSIGNED, 1),
        f"counted missing +{missing:.0f}, mismatch +{mismatch:.0f}",
    )
    _untouched(row, a, FORGED)
    ctx.finish(row, time.monotonic(), before)
    return row


def uuid_collision(ctx: Context) -> Row:
    row = Row("UUID collision")
    before = ctx.loads()
    a = attack(ctx)
    sent, dead = len(a.rogue), a.lettered(a.rogue, "quarantine")
    refused = a.delta(labelled(REFUSED, reason="quarantine"))
    quarantined = a.delta("fairlane_scorer_gpu_samples_quarantined_total")
    gauge = a.after.get("fairlane_scorer_quarantined_gpus", 0.0)
    row.injected = f"{sent} samples of {ROGUE!r}, signed by its own key, naming {_targets(a)}"
    row.notes.append(
        f"records sent {sent} / dead-lettered {dead} / scores changed {a.scores_changed} / "
        f"degraded events {len(a.degraded)}; refused 'quarantine' +{refused:.0f}, GPU samples "
        f"quarantined +{quarantined:.0f}, quarantined GPUs gauge {gauge:.0f}"
    )
    row.check(dead == sent, f"{sent - dead} colliding samples not dead-lettered as 'quarantine'")
    row.check(refused == sent, f"refused 'quarantine' +{refused:.0f}, not {sent}")
    want = sent * len(a.targets)
    row.check(quarantined == want, f"GPU samples quarantined +{quarantined:.0f}, not {want}")
    row.check(gauge >= len(a.targets), f"the quarantined GPUs gauge says {gauge:.0f}")
    _untouched(row, a, ROGUE)
    ctx.finish(row, time.monotonic(), before)
    return row


def replay(ctx: Context) -> Row:
    row = Row("Replay")
    before = ctx.loads()
    a = attack(ctx)
    tolerance_s = ctx.stack.services["scorer"].env["FAIRLANE_REPLAY_TOLERANCE_S"]
    error = a.letters.get(a.replay, "not dead-lettered")
    refused = a.delta(labelled(REFUSED, reason="replay"))
    uuids = {u for u, n in a.targets.items() if n == a.replay_node}
    scored = sum(s.uuid in uuids and s.ts_ms == a.replay_ts_ms for s in a.scores)
    row.injected = (
        f"{a.replay_node}'s first record on the topic, headers and all, sent again "
        f"{a.replay_age_s:.0f} s after its time (tolerance {tolerance_s} s)"
    )
    row.notes.append(
        f"dead-lettered {error[:60]!r}; refused 'replay' +{refused:.0f}; score records of its "
        f"time since: {scored}"
    )
    row.check(error.startswith("replay: "), f"the replay's dead letter: {error[:200]}")
    row.check(refused == 1, f"refused 'replay' +{refused:.0f}, not 1")
    row.check(scored == 0, f"{scored} score records of the replayed time")
    ctx.finish(row, time.monotonic(), before)
    return row


def flood(ctx: Context) -> Row:
    row = Row("Flood from one node")
    before = ctx.loads()
    a = attack(ctx)
    sent = len(a.flood)
    refused = a.delta(labelled(REFUSED, reason="rate"))
    lettered = a.lettered(a.flood, "rate")
    let_through = FLOOD_RECORDS * FLOOD_STEP_MS // SPACING_MS + 1  # one per second, and one
    rss0, peak = a.rss_mib
    recovery = "never" if a.recovery_s is None else f"{a.recovery_s:.1f} s"
    scored = "not all" if a.fleet_scored_s is None else f"within {a.fleet_scored_s:.1f} s"
    row.injected = (
        f"{sent} samples of {FLOOD!r}, signed, {FLOOD_STEP_MS} ms apart in sample time, in "
        f"{a.flood_sent_s:.1f} s ({sent / a.flood_sent_s:,.0f} records/s)"
    )
    row.notes.append(
        f"refused 'rate' {refused:.0f} (dead-lettered {lettered}), scored "
        f"{a.scores_of(FLOOD)} score records; scorer caught up {recovery} after the last; "
        f"every node of the fleet scored again {scored} of the flood's start; scorer RSS "
        f"{rss0:.0f} -> {peak:.0f} MiB"
    )
    row.check(refused >= sent - let_through, f"only {refused:.0f} of {sent} refused as 'rate'")
    row.check(lettered == refused, f"{lettered} dead-lettered 'rate', {refused:.0f} counted")
    row.check(
        a.recovery_s is not None and a.recovery_s <= MAX_RECOVERY_S,
        f"the scorer caught up {recovery} after the flood, not within {MAX_RECOVERY_S:.0f} s",
    )
    row.check(a.fleet_scored_s is not None, "some nodes of the fleet were not scored meanwhile")
    row.check(peak - rss0 < MAX_RSS_GROWTH_MIB, f"the scorer's RSS grew {peak - rss0:.0f} MiB")
    ctx.finish(row, time.monotonic(), before)
    return row
