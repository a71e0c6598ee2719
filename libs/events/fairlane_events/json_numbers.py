"""JSON's rules for numbers and booleans, as pydantic field types (records and API bodies).

pydantic's lax mode takes ``true`` for 1 and ``"42"`` for 42, which JSON Schema rejects;
its strict mode rejects ``3.0`` for an integer, which JSON Schema accepts (JSON has one
number type). These types accept exactly what JSON Schema's ``integer``, ``number`` and
``boolean`` accept:

    count: Annotated[StrictInt, Field(ge=0, le=10), AS_INT]

``AS_INT`` must come last in the ``Annotated``: constraints after a validator cannot be
written into the JSON Schema, which would then carry unknown keywords (``"ge"``) that
every validator ignores. A model whose config is ``strict=True`` needs only ``AS_INT``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

__all__ = ["AS_INT", "StrictBool", "StrictFloat", "StrictInt"]


def _integral_float_to_int(value: Any) -> Any:
    """``3.0`` is the JSON number 3: an integer by JSON Schema, so it is one here too."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


AS_INT = BeforeValidator(_integral_float_to_int)
StrictInt = Annotated[int, Field(strict=True)]
StrictFloat = Annotated[float, Field(strict=True)]  # strict floats still take integers
StrictBool = Annotated[bool, Field(strict=True)]
