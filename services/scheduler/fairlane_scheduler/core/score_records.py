"""The latest score record of every GPU, kept out of the garbage collector's walks (pure).

A pydantic record is four objects the cyclic collector tracks (the model, its
``__dict__``, its fields-set set, its components dict); 100,000 GPUs made 380,000, and
every full collection walked them all: 110 to 380 ms on the shared 2-core machine, the
extender's whole p99 tail (docs/benchmarks-history.md, Extender). Records are replaced as scores
arrive, so ``gc.freeze()`` after loading does not keep them out. Here each record is one
flat tuple of its field values: a tuple that holds only numbers and strings is untracked
by the collector the first time it sees it. Reading one builds the model again
(``model_construct``: no validation, the values were validated when it was decoded).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fairlane_events.records import GpuScore

__all__ = ["ScoreRecords"]

_FIELDS = tuple(name for name in GpuScore.model_fields if name != "components")
_TS = _FIELDS.index("ts_ms")
_N = len(_FIELDS)


def _pack(score: GpuScore) -> tuple[Any, ...]:
    """The fields, then the components as name, value, name, value...: one flat tuple,
    untracked by the first collection that sees it (a nested one takes one per level)."""
    values = [getattr(score, name) for name in _FIELDS]
    for pair in score.components.items():
        values.extend(pair)
    return tuple(values)


def _unpack(packed: tuple[Any, ...]) -> GpuScore:
    values = dict(zip(_FIELDS, packed, strict=False))
    values["components"] = dict(zip(packed[_N::2], packed[_N + 1 :: 2], strict=True))
    return GpuScore.model_construct(**values)


def _component(packed: tuple[Any, ...], name: str) -> Any:
    for i in range(_N, len(packed), 2):
        if packed[i] == name:
            return packed[i + 1]
    return None


class ScoreRecords(Mapping[str, GpuScore]):
    """uuid -> the GPU's latest record, read-only to everyone but the fleet view."""

    def __init__(self) -> None:
        self._packed: dict[str, tuple[Any, ...]] = {}

    def __getitem__(self, uuid: str) -> GpuScore:
        return _unpack(self._packed[uuid])

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._packed

    def discard(self, uuid: str) -> None:
        self._packed.pop(uuid, None)

    def ts_ms(self, uuid: str) -> int | None:
        """When the held record of ``uuid`` was taken (None: no record)."""
        packed = self._packed.get(uuid)
        return None if packed is None else int(packed[_TS])

    def columns(self, *names: str) -> Iterator[tuple[Any, ...]]:
        """These fields of every record, without building the models (a metrics scrape
        reads all 100,000)."""
        at = [_FIELDS.index(name) for name in names]
        return (tuple(packed[i] for i in at) for packed in self._packed.values())

    def component(self, name: str) -> Iterator[Any]:
        """Component ``name`` of every record (None where it has none)."""
        return (_component(packed, name) for packed in self._packed.values())

    def put(self, score: GpuScore) -> None:
        self._packed[score.uuid] = _pack(score)
