"""How fast each job type trains on each GPU model: measured steps/s, or a rule where not measured.

A :class:`ThroughputTable` maps (job type, GPU model, scale factor) to the steps per second
of the whole job (all its GPUs together, as Gavel measures and counts them). The shipped
table is Gavel's isolated throughputs (26 job types x {K80, P100, V100} x scale factors
{1, 2, 4, 8}); a user's own measurements read from the documented CSV
``job_type,model,scale_factor,steps_per_s`` (docs/evaluation-formats.md).

:meth:`ThroughputTable.steps_per_s` answers for any model and GPU count:

- measured (job type, model, GPUs): the measurement;
- GPUs not measured: the nearest measured scale factor ``s`` (:func:`nearest_scale_factor`)
  scaled linearly, ``rate(s) x gpus / s`` (ideal scaling: optimistic beyond what was
  measured, and the only rule that needs no model of communication);
- a model without measurements for that job type (A100, H100, ...): the V100 figure times
  the catalogue's prior ``relative_speed(model) / relative_speed(V100)``.

A rate of 0 means the job cannot run there: Gavel records 0.0 where a configuration did
not run (ResNet-50 at batch size 128 on 2-8 K80s, out of memory), and the rules above keep
it 0, so a simulator must not place such a job on that model.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType

from fairlane_eval.core._csv import rows, write_rows
from fairlane_eval.errors import ThroughputError
from fairlane_events.gpu_models import CATALOG, find_model

__all__ = [
    "COLUMNS",
    "SCALE_FROM_MODEL",
    "Fill",
    "ThroughputError",
    "ThroughputTable",
    "gavel_throughputs",
    "nearest_scale_factor",
    "read_throughputs_csv",
    "shipped_throughputs",
    "write_throughputs_csv",
]

COLUMNS = ("job_type", "model", "scale_factor", "steps_per_s")

#: The measured model an unmeasured model's rate is scaled from.
SCALE_FROM_MODEL = "V100"

_SHIPPED = "gavel_throughputs.csv"
_GAVEL_MODELS = {"k80": "K80", "p100": "P100", "v100": "V100"}
_GAVEL_KEY = re.compile(r"^\('(?P<job_type>.+)', (?P<scale>\d+)\)$")

Key = tuple[str, str, int]


def nearest_scale_factor(measured: Iterable[int], gpus: int) -> int:
    """The measured scale factor nearest to ``gpus`` by ratio: argmin |log(s / gpus)|.

    Ties go to the larger factor. 3 GPUs -> 4 (4/3 < 3/2), 6 -> 8, 16 -> 8 when 8 is the
    largest measured.
    """
    choices = sorted(set(measured))
    if not choices:
        raise ThroughputError("no measured scale factors")
    return min(choices, key=lambda s: (abs(math.log(s / gpus)), -s))


def _model_key(model: str) -> str:
    spec = find_model(model)
    return spec.key if spec is not None else model


@dataclass(frozen=True)
class Fill:
    """A model the table has no figure for, for some job types: their rates are
    ``SCALE_FROM_MODEL``'s times ``factor`` (the catalogue's relative speeds)."""

    model: str
    job_types: tuple[str, ...]
    factor: float


@dataclass(frozen=True)
class ThroughputTable:
    """Steps/s of a whole job per (job type, catalogue model key, scale factor)."""

    rates: Mapping[Key, float]
    _index: Mapping[str, Mapping[str, tuple[tuple[int, float], ...]]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        index: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for (job_type, model, scale), rate in self.rates.items():
            if not job_type or not model:
                raise ThroughputError(f"empty job type or model in {(job_type, model, scale)}")
            if scale < 1:
                raise ThroughputError(f"{(job_type, model, scale)}: scale factor must be >= 1")
            if not (math.isfinite(rate) and rate >= 0):
                raise ThroughputError(f"{(job_type, model, scale)}: steps/s must be >= 0")
            index.setdefault(job_type, {}).setdefault(model, []).append((scale, rate))
        if not index:
            raise ThroughputError("empty throughput table")
        object.__setattr__(self, "rates", MappingProxyType(dict(sorted(self.rates.items()))))
        frozen = {
            jt: MappingProxyType({m: tuple(sorted(p)) for m, p in sorted(by_model.items())})
            for jt, by_model in sorted(index.items())
        }
        object.__setattr__(self, "_index", MappingProxyType(frozen))

    def job_types(self) -> tuple[str, ...]:
        return tuple(self._index)

    def models(self) -> tuple[str, ...]:
        """The models measured for at least one job type."""
        return tuple(sorted({m for by_model in self._index.values() for m in by_model}))

    def scale_factors(self, job_type: str) -> tuple[int, ...]:
        """The GPU counts ``job_type`` was measured at, on any model."""
        by_model = self._by_model(job_type)
        return tuple(sorted({s for points in by_model.values() for s, _ in points}))

    def fills(self, job_types: Iterable[str], models: Iterable[str]) -> tuple[Fill, ...]:
        """Per model of ``models`` (catalogue keys) that some of ``job_types`` were not
        measured on, the rule :meth:`steps_per_s` fills them with (one entry a model)."""
        types = tuple(dict.fromkeys(job_types))
        found = []
        for model in dict.fromkeys(models):
            missing = tuple(t for t in types if _model_key(model) not in self._by_model(t))
            spec = find_model(model)
            if missing and spec is not None:
                factor = spec.relative_speed / CATALOG[SCALE_FROM_MODEL].relative_speed
                found.append(Fill(spec.key, missing, factor))
        return tuple(found)

    def is_measured(self, job_type: str, model: str, gpus: int) -> bool:
        return (job_type, _model_key(model), gpus) in self.rates

    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float:
        """Steps/s of a ``gpus``-GPU job of ``job_type`` on healthy GPUs of ``model``.

        ``rate(type, m, s) x gpus / s`` with ``s`` the nearest measured scale factor, and
        for a model not measured for this type ``m = V100`` and a factor
        ``relative_speed(model) / relative_speed(V100)`` (module docstring).
        """
        if gpus < 1:
            raise ThroughputError(f"{job_type!r} on {model}: gpus must be >= 1, got {gpus}")
        by_model = self._by_model(job_type)
        key = _model_key(model)
        factor = 1.0
        if key not in by_model:
            spec = find_model(key)
            if spec is None:
                raise ThroughputError(f"unknown GPU model {model!r}; known: {', '.join(CATALOG)}")
            if SCALE_FROM_MODEL not in by_model:
                raise ThroughputError(
                    f"{job_type!r}: no {model} or {SCALE_FROM_MODEL} figure to scale from"
                )
            factor = spec.relative_speed / CATALOG[SCALE_FROM_MODEL].relative_speed
            key = SCALE_FROM_MODEL
        points = dict(by_model[key])
        scale = nearest_scale_factor(points, gpus)
        return points[scale] * factor * gpus / scale

    def _by_model(self, job_type: str) -> Mapping[str, tuple[tuple[int, float], ...]]:
        try:
            return self._index[job_type]
        except KeyError:
            raise ThroughputError(
                f"unknown job type {job_type!r}; known: {', '.join(self._index)}"
            ) from None


def read_throughputs_csv(text: str, *, source: str = "<throughputs csv>") -> ThroughputTable:
    """Parse the documented CSV; models are catalogue keys or NVML names (mapped to keys)."""
    rates: dict[Key, float] = {}
    lines: dict[Key, int] = {}
    for row in rows(text, COLUMNS, source=source, error=ThroughputError):
        scale = row.integer("scale_factor")
        if scale < 1:
            raise row.fail("scale_factor", f"must be >= 1, got {scale}")
        rate = row.number("steps_per_s")
        if rate < 0:
            raise row.fail("steps_per_s", f"must be >= 0, got {rate}")
        key = (row.text("job_type"), _model_key(row.text("model")), scale)
        if key in lines:
            raise row.fail("job_type", f"{key} repeats line {lines[key]}")
        rates[key], lines[key] = rate, row.line
    if not rates:
        raise ThroughputError(f"{source}: no rows")
    return ThroughputTable(rates)


def write_throughputs_csv(table: ThroughputTable) -> str:
    return write_rows(COLUMNS, ((*key, rate) for key, rate in table.rates.items()))


def gavel_throughputs(json_text: str) -> ThroughputTable:
    """Gavel's ``simulation_throughputs.json``: the isolated (``"null"``) rates of k80/p100/v100.

    Gavel keys each entry ``"('<job type>', <scale factor>)"``; the ``"null"`` value is the
    job alone on its GPUs (the others are co-located pairs). The ``*_unconsolidated``
    tables (a multi-GPU job spread over servers) are left out: the simulator places gangs
    whole on nodes where it can.
    """
    try:
        data = json.loads(json_text)
    except json.JSONDecodeError as exc:
        raise ThroughputError(f"not JSON: {exc}") from exc
    rates: dict[Key, float] = {}
    for gavel_model, model in _GAVEL_MODELS.items():
        for key, entry in data.get(gavel_model, {}).items():
            match = _GAVEL_KEY.match(key)
            if match is None or not isinstance(entry, dict) or "null" not in entry:
                raise ThroughputError(f"{gavel_model}: unexpected entry {key!r}")
            rates[(match["job_type"], model, int(match["scale"]))] = float(entry["null"])
    if not rates:
        raise ThroughputError(f"no {'/'.join(_GAVEL_MODELS)} entries")
    return ThroughputTable(rates)


@functools.cache
def shipped_throughputs() -> ThroughputTable:
    """Gavel's measured isolated throughputs (data/gavel_throughputs.csv)."""
    text = resources.files("fairlane_eval").joinpath("data", _SHIPPED).read_text()
    return read_throughputs_csv(text, source=_SHIPPED)
