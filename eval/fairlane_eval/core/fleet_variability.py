"""How much identical GPUs differ: per-GPU relative speeds, measured on a fleet.

The documented CSV has one row per measured GPU: a ``relative_speed`` column (the GPU's
speed over its model's typical GPU: 0.95 = 5 % slower) and an optional ``model`` column
(catalogue key or NVML name; empty or absent = any model). Other columns are ignored, so
the fleet simulator's own PAL file (``gpu,runs,median_iter_time,relative_speed``) reads as
it is. The simulator draws each GPU's persistent speed factor from its model's list, or
from the any-model list when its model has none (:func:`speeds_for_model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fairlane_eval.core._csv import rows
from fairlane_eval.errors import VariabilityError
from fairlane_events.gpu_models import CATALOG, find_model
from fairlane_sim.variability import measured_speeds

__all__ = [
    "Variability",
    "VariabilityError",
    "default_variability",
    "read_variability_csv",
    "speeds_for_model",
]

#: Catalogue model key (None: any model) -> measured relative speeds, sorted ascending.
Variability = Mapping[str | None, tuple[float, ...]]

#: A relative speed outside (0, 10] is a unit mistake (an iteration time, a percentage).
_MAX_RELATIVE_SPEED = 10.0


def read_variability_csv(text: str, *, source: str = "<variability csv>") -> Variability:
    """Per model (catalogue key, or None for any model), the measured speeds, sorted ascending."""
    speeds: dict[str | None, list[float]] = {}
    for row in rows(text, ("relative_speed",), source=source, error=VariabilityError):
        speed = row.number("relative_speed")
        if not 0 < speed <= _MAX_RELATIVE_SPEED:
            raise row.fail(
                "relative_speed", f"must be in (0, {_MAX_RELATIVE_SPEED:g}], got {speed}"
            )
        name = row.text("model", "")
        model = None
        if name:
            spec = find_model(name)
            if spec is None:
                raise row.fail("model", f"unknown GPU model {name!r}; known: {', '.join(CATALOG)}")
            model = spec.key
        speeds.setdefault(model, []).append(speed)
    if not speeds:
        raise VariabilityError(f"{source}: no rows")
    return MappingProxyType({model: tuple(sorted(v)) for model, v in speeds.items()})


def default_variability() -> Variability:
    """PAL's 336 V100s on ResNet-50 as the any-model speeds: ``{None: measured_speeds()}``.

    The same as reading a variability CSV of those rows without a model column.
    """
    return MappingProxyType({None: measured_speeds()})


def speeds_for_model(variability: Variability, model: str) -> tuple[float, ...]:
    """The speeds measured for ``model``'s catalogue key, else the any-model ones."""
    spec = find_model(model)
    key = spec.key if spec is not None else model
    if key in variability:
        return variability[key]
    if None in variability:
        return variability[None]
    raise VariabilityError(f"no speeds for {model} and no any-model speeds")
