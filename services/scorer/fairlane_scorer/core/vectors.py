"""The score's per-sample arithmetic on whole batches of GPUs at once (pure numpy).

The same formulas as :mod:`fairlane_scoring` (the reference, the parity oracle), written
over arrays: one row per GPU update, components in ``COMPONENTS`` order with NaN where the
reference has ``None``. Each function says which reference function it stands for;
tests/property/test_scorer_parity.py holds the results equal to the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from fairlane_events.fast_samples import AnyGpuSample
from fairlane_scoring.components import CLOCK_EVENT_IDLE
from fairlane_scoring.config import HEALTH_COMPONENTS, ScoreConfig
from fairlane_scoring.outliers import MAD_TO_SIGMA

__all__ = [
    "IntArray",
    "component_rows",
    "decayed_scores",
    "hampel_rows",
    "health_gates",
    "instant_rows",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_SPLIT = len(HEALTH_COMPONENTS)


#: The metrics the components read, as floats (None: NaN). Bytes are at most 2**50 and
#: so exact in a float64: the ratios equal Python's int / int.
_METRICS = attrgetter(
    "sm_clock_mhz",
    "max_sm_clock_mhz",
    "temp_c",
    "slowdown_temp_c",
    "sm_active",
    "gpu_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "mem_util_pct",
    "power_w",
    "power_limit_w",
)

#: What the health gate reads of a sample.
_GATE_FIELDS = attrgetter("healthy", "remapped_rows_pending", "ecc_uncorrected_volatile")


def _ratio(a: FloatArray, b: FloatArray) -> FloatArray:
    """a / b where both are reported and b is not 0, else NaN."""
    ok = ~np.isnan(a) & ~np.isnan(b) & (b != 0)
    with np.errstate(over="ignore"):  # a tiny b: inf, as Python's float division gives
        return np.where(ok, a / np.where(ok, b, 1.0), np.nan)


def _beyond(load: FloatArray, held: FloatArray | float) -> FloatArray:
    """``components._beyond`` (before the clip): 1 - max(0, load - held), NaN kept."""
    return 1.0 - np.maximum(load - held, 0.0)


def component_rows(
    samples: Sequence[AnyGpuSample],
    thermal_margin_c: float,
    held_share: FloatArray | None = None,
    held_bytes: FloatArray | None = None,
) -> FloatArray:
    """``components.component_scores`` of every sample (rows in ``COMPONENTS`` order),
    each with what fractional tenants held of its GPU (``held_share``, ``held_bytes``:
    one per sample; None: nothing held)."""
    m = np.array([_METRICS(s) for s in samples], dtype=np.float64).reshape(-1, 11)
    sm, max_sm, temp, slowdown, active, util, used, total, mem_util, power, limit = m.T
    # The reasons bitmask goes up to 2**64: tested as Python ints, not as floats.
    throttled = np.array(
        [(r := s.clock_event_reasons) is not None and bool(r & ~CLOCK_EVENT_IDLE) for s in samples],
        dtype=bool,
    )
    clock = np.clip(_ratio(sm, max_sm), 0.0, 1.0)
    clock = np.where(throttled | np.isnan(clock), clock, 1.0)
    share = 0.0 if held_share is None else held_share
    held = 0.0 if held_bytes is None else held_bytes
    compute = np.where(np.isnan(active), _beyond(util / 100.0, share), _beyond(active, share))
    columns = (
        clock,
        (slowdown - temp) / thermal_margin_c,
        compute,
        1.0 - _ratio(np.maximum(used - held, 0.0), total),
        _beyond(mem_util / 100.0, share),
        _beyond(_ratio(power, limit), share),
    )
    return np.clip(np.column_stack(columns), 0.0, 1.0)


def _median(sorted_values: FloatArray, counts: IntArray) -> FloatArray:
    """The median of each row of ``sorted_values`` (ascending, NaN last; ``counts`` values
    that are not NaN, at least one): the middle value, or the mean of the two middle ones
    (as ``statistics.median``: (a + b) / 2)."""
    low = np.take_along_axis(sorted_values, ((counts - 1) // 2)[..., None], axis=-1)[..., 0]
    high = np.take_along_axis(sorted_values, (counts // 2)[..., None], axis=-1)[..., 0]
    return (low + high) / 2


def hampel_rows(windows: FloatArray, n_sigma: float, min_scale: float) -> FloatArray:
    """``fairlane_scoring.outliers.hampel`` for every (GPU, component) at once.

    ``windows``: shape (GPUs, components, k), the causal window of each component with the
    newest value last and NaN for values left out (not reported, before the load history
    restarted, not yet seen). A component whose newest value is NaN comes out NaN."""
    newest = windows[..., -1]
    present = ~np.isnan(newest)
    counts = np.maximum(np.count_nonzero(~np.isnan(windows), axis=-1), 1)
    m = _median(np.sort(windows, axis=-1), counts)
    mad = _median(np.sort(np.abs(windows - m[..., None]), axis=-1), counts)
    scale = np.maximum(MAD_TO_SIGMA * mad, min_scale)
    out = np.where(np.abs(newest - m) > n_sigma * scale, m, newest)
    return np.where(present, out, np.nan)


def _family_mean(values: FloatArray, weights: FloatArray) -> FloatArray:
    """``combine.family_mean`` per row: NaN where nothing with a positive weight is present."""
    present = ~np.isnan(values)
    total = np.where(present, weights, 0.0).sum(axis=-1)
    weighted = np.where(present, weights * np.nan_to_num(values), 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.nan)


def instant_rows(filtered: FloatArray, weights: Sequence[float]) -> tuple[FloatArray, FloatArray]:
    """``combine.instant_score`` of each row of ``filtered`` (GPUs x components), with
    its load counted and with it masked: H x L with an absent family left out, and 0
    when neither family is present."""
    w = np.asarray(weights, dtype=np.float64)
    health = _family_mean(filtered[:, :_SPLIT], w[:_SPLIT])
    load = _family_mean(filtered[:, _SPLIT:], w[_SPLIT:])
    no_health = np.isnan(health)
    h = np.where(no_health, 1.0, health)
    counted = np.where(no_health & np.isnan(load), 0.0, h * np.where(np.isnan(load), 1.0, load))
    masked = np.where(no_health, 0.0, h)
    return counted, masked


def health_gates(
    samples: Sequence[AnyGpuSample], previous_ecc: IntArray, no_ecc: int
) -> tuple[FloatArray, IntArray]:
    """``components.health_gate`` of every sample against its GPU's previous ECC count
    (``no_ecc``: none), and each GPU's next baseline (the sample's count, if it has one).
    Counts go up to 2**63 - 1: compared as int64, not as floats."""
    fields = [_GATE_FIELDS(s) for s in samples]
    ok = np.array([bool(healthy) and not pending for healthy, pending, _ in fields], dtype=bool)
    ecc = np.array([no_ecc if e is None else e for _, _, e in fields], dtype=np.int64)
    rose = (ecc != no_ecc) & (previous_ecc != no_ecc) & (ecc > previous_ecc)
    return np.where(ok & ~rose, 1.0, 0.0), np.where(ecc != no_ecc, ecc, previous_ecc)


def decayed_scores(
    kept: FloatArray, now_ms: FloatArray, load_since: FloatArray, config: ScoreConfig
) -> tuple[FloatArray, IntArray]:
    """``reference.score_kept``'s score and ``samples_in_window`` for every GPU ``j``
    whose KEPT_COLUMNS rows are ``kept[j]`` (NaN rows: none), at ``now_ms[j]`` with load
    counted from ``load_since[j]``: gate x decayed mean with w = exp(-rate x age) over
    0 <= age <= history_s, the gate the minimum inside the window; 0 with no sample
    inside it, and clipped to 0..1 (a weighted mean of values in 0..1 can round to just
    above 1)."""
    ts, gates, instants, masked = np.moveaxis(kept, -1, 0)
    values = np.where(ts >= load_since[:, None], instants, masked)
    ages = (now_ms[:, None] - ts) / 1000.0
    inside = (ages >= 0) & (ages <= config.history_s)  # NaN rows: False
    weights = np.where(inside, np.exp(-config.decay_rate_per_s * np.clip(ages, 0, None)), 0.0)
    n = np.count_nonzero(weights, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(inside, weights * values, 0.0).sum(axis=1) / weights.sum(axis=1)
    gate = np.where(inside, gates, np.inf).min(axis=1, initial=np.inf)
    return np.where(n > 0, np.clip(gate * mean, 0.0, 1.0), 0.0), n
