"""Hypothesis strategies drawn from a JSON Schema: its instances and its near misses.

``hypothesis-jsonschema`` (last release 0.23.1) drives Hypothesis internals that current
Hypothesis no longer has (``many.more``), so this module covers the keywords Fairlane's
record schemas use, and raises on any other keyword: a schema change that this module
does not understand fails the test instead of going unchecked.

- :func:`instances` draws values the schema accepts;
- :func:`near_misses` draws values that differ from an accepted one in exactly one
  place (a wrong type, a bound just crossed, a required key dropped, an unknown key
  added, a pattern broken by a trailing newline, ...). Most are invalid, some are not
  (``null`` where ``anyOf`` allows it): the test asserts agreement, not invalidity.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = ["instances", "json_values", "near_misses"]

Schema = Mapping[str, Any]

_ANNOTATIONS = {"title", "description", "default", "$schema", "$id", "$defs"}
_KNOWN = _ANNOTATIONS | {
    "$ref",
    "anyOf",
    "type",
    "const",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "patternProperties",
}
#: Arrays stay short: a record's validity never depends on its 60th GPU.
_MAX_ITEMS = 3
_MAX_TEXT = 12

#: Any JSON value, small.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=_MAX_TEXT),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=_MAX_TEXT), inner, max_size=3)
    ),
    max_leaves=6,
)


def _check(schema: Schema) -> None:
    unknown = set(schema) - _KNOWN
    if unknown:
        raise NotImplementedError(f"schema_strategies does not know {sorted(unknown)}")


def _resolve(schema: Schema, root: Schema) -> Schema:
    """Follow a local ``$ref`` (``#/$defs/Name``), the only kind pydantic writes."""
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise NotImplementedError(f"$ref {ref}")
        schema = root["$defs"][ref.removeprefix("#/$defs/")]
    _check(schema)
    return schema


def _int_bounds(schema: Schema) -> tuple[int | None, int | None]:
    low, high = schema.get("minimum"), schema.get("maximum")
    low = None if low is None else math.ceil(low)
    high = None if high is None else math.floor(high)
    if "exclusiveMinimum" in schema:
        low = math.floor(schema["exclusiveMinimum"]) + 1
    if "exclusiveMaximum" in schema:
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    return low, high


def _integers(schema: Schema) -> st.SearchStrategy[Any]:
    low, high = _int_bounds(schema)
    ints = st.integers(low, high)
    # JSON has one number type: 3.0 is the integer 3 (exactly representable ones only).
    as_float = ints.filter(lambda i: abs(i) <= 2**53).map(float)
    return ints | as_float


def _numbers(schema: Schema) -> st.SearchStrategy[Any]:
    low, high = schema.get("minimum"), schema.get("maximum")
    floats = st.floats(
        min_value=schema.get("exclusiveMinimum", low),
        max_value=schema.get("exclusiveMaximum", high),
        exclude_min="exclusiveMinimum" in schema,
        exclude_max="exclusiveMaximum" in schema,
        allow_nan=False,
        allow_infinity=False,
    )
    return floats | _integers(schema)


def _strings(schema: Schema) -> st.SearchStrategy[str]:
    low, high = schema.get("minLength", 0), schema.get("maxLength", _MAX_TEXT)
    if "pattern" in schema:
        pattern: str = schema["pattern"]
        return st.from_regex(pattern, fullmatch=True).filter(lambda s: low <= len(s) <= high)
    return st.text(min_size=low, max_size=min(high, low + _MAX_TEXT))


def _objects(schema: Schema, root: Schema) -> st.SearchStrategy[dict[str, Any]]:
    properties: Mapping[str, Schema] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    fixed = {k: instances(v, root) for k, v in properties.items() if k in required}
    optional = {k: instances(v, root) for k, v in properties.items() if k not in required}
    extra = schema.get("additionalProperties", True)
    rest: st.SearchStrategy[dict[str, Any]] = st.just({})
    if extra is not False:
        values = json_values if extra is True else instances(extra, root)
        keys = st.text(max_size=_MAX_TEXT).filter(lambda k: k not in properties)
        rest = st.dictionaries(keys, values, max_size=3)
    patterned: Mapping[str, Schema] = schema.get("patternProperties", {})
    if patterned:  # a dictionary of one pattern's keys
        rest = st.one_of(
            [
                st.dictionaries(
                    st.from_regex(pattern, fullmatch=True).filter(lambda k: k not in properties),
                    instances(value, root),
                    max_size=3,
                )
                for pattern, value in patterned.items()
            ]
        )
    return st.builds(
        lambda known, unknown: {**unknown, **known},
        st.fixed_dictionaries(fixed, optional=optional),
        rest,
    )


def instances(schema: Schema, root: Schema | None = None) -> st.SearchStrategy[Any]:
    """Values ``schema`` accepts."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        return st.one_of([instances(s, root) for s in schema["anyOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        return _objects(schema, root)
    if kind == "array":
        low = schema.get("minItems", 0)
        high = min(schema.get("maxItems", low + _MAX_ITEMS), low + _MAX_ITEMS)
        return st.lists(instances(schema.get("items", {}), root), min_size=low, max_size=high)
    by_type: dict[str, st.SearchStrategy[Any]] = {
        "integer": _integers(schema) if kind == "integer" else st.nothing(),
        "number": _numbers(schema) if kind == "number" else st.nothing(),
        "string": _strings(schema) if kind == "string" else st.nothing(),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    if kind is None:
        return json_values
    return by_type[kind]


def _crossed_bounds(schema: Schema) -> list[Any]:
    """Numbers just outside each bound, and the bound itself where it is exclusive."""
    out: list[Any] = []
    for key in ("minimum", "exclusiveMinimum"):
        if key in schema:
            bound = schema[key]
            out += [bound - 1, math.nextafter(bound, -math.inf)]
            if key == "exclusiveMinimum":
                out += [bound, float(bound)]
    for key in ("maximum", "exclusiveMaximum"):
        if key in schema:
            bound = schema[key]
            out += [bound + 1, math.nextafter(bound, math.inf)]
            if key == "exclusiveMaximum":
                out += [bound, float(bound)]
    return out


def _leaf_misses(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    kind = schema.get("type")
    wrong: list[st.SearchStrategy[Any]] = [json_values, st.booleans(), st.sampled_from(["", "1"])]
    if kind in ("integer", "number"):
        bounds = _crossed_bounds(schema)
        if bounds:
            wrong.append(st.sampled_from(bounds))
        if kind == "integer":
            wrong.append(st.floats(allow_nan=False, allow_infinity=False).filter(_not_integral))
        wrong.append(instances(schema, root).map(str))  # "42" for 42
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if low > 0:
            wrong.append(st.text(max_size=low - 1))
        if high is not None:
            wrong.append(st.text(min_size=high + 1, max_size=high + 3))
        if "pattern" in schema:
            valid = instances(schema, root)
            wrong += [valid.map(lambda s: s + "\n"), valid.map(lambda s: s + " "), st.text()]
    if "const" in schema or "enum" in schema:
        wrong.append(st.text(max_size=_MAX_TEXT))
        wrong.append(instances(schema, root).map(lambda s: s + "x"))
    return st.one_of(wrong)


def _not_integral(x: float) -> bool:
    return not x.is_integer()


def _container_misses(schema: Schema, root: Schema) -> list[st.SearchStrategy[Any]]:
    """Misses of an object or array as a whole: a key dropped or added, a size crossed."""
    misses: list[st.SearchStrategy[Any]] = []
    for branch in (_resolve(b, root) for b in [schema, *schema.get("anyOf", ())]):
        valid = instances(branch, root)
        if branch.get("type") == "object":
            for name in branch.get("required", ()):
                misses.append(valid.map(functools.partial(_without, key=name)))
            if branch.get("additionalProperties", True) is False:
                misses.append(st.builds(lambda v, x: {**v, "unexpected": x}, valid, json_values))
        if branch.get("type") == "array":
            items = instances(branch.get("items", {}), root)
            low, high = branch.get("minItems", 0), branch.get("maxItems")
            if low > 0:
                misses.append(st.lists(items, max_size=low - 1))
            if high is not None:
                misses.append(st.lists(items, min_size=high + 1, max_size=high + 1))
    return misses


def _without(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}


def _site_misses(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    branches = [_resolve(b, root) for b in schema.get("anyOf", [schema])]
    return st.one_of([_leaf_misses(b, root) for b in branches] + _container_misses(schema, root))


# A site is a place in a record: the keys that lead there (a GPU's field is
# ("gpus", 0, "temp_c")), and the schema of each step.
_Site = tuple[tuple[str | int, Schema], ...]


def _sites(schema: Schema, root: Schema, path: _Site = ()) -> list[_Site]:
    schema = _resolve(schema, root)
    out = [path] if path else []
    for branch in (_resolve(b, root) for b in [schema, *schema.get("anyOf", ())]):
        for name, sub in branch.get("properties", {}).items():
            out += _sites(sub, root, (*path, (name, sub)))
        extra = branch.get("additionalProperties")
        if isinstance(extra, Mapping):
            out += _sites(extra, root, (*path, ("k", extra)))
        if branch.get("type") == "array":
            out += _sites(branch.get("items", {}), root, (*path, (0, branch.get("items", {}))))
    return out


def _container_like(key: str | int, value: Any) -> bool:
    return isinstance(value, list if isinstance(key, int) else dict)


def near_misses(schema: Schema, root: Schema | None = None) -> st.SearchStrategy[Any]:
    """Values one change away from what ``schema`` accepts (mostly rejected).

    The change is made at a place chosen uniformly among every place the schema
    describes (the record itself, each field, each GPU's fields), so a deep field is
    hit as often as a top-level one.
    """
    root = schema if root is None else root
    schema = _resolve(schema, root)
    # The record itself is one more place, last so that shrinking prefers a field.
    sites: list[_Site] = [*_sites(schema, root), ()]

    @st.composite
    def one_change(draw: st.DrawFn) -> Any:
        site = draw(st.sampled_from(sites))
        if not site:
            return draw(_site_misses(schema, root))
        record = draw(instances(schema, root))
        cur = record
        for step, (key, child_schema) in enumerate(site[:-1]):
            child = _get(cur, key)
            if not _container_like(site[step + 1][0], child):
                child = draw(_instance_of_container(child_schema, root))
                _put(cur, key, child)
            cur = child
        key, leaf_schema = site[-1]
        _put(cur, key, draw(_site_misses(leaf_schema, root)))
        return record

    return one_change()


def _instance_of_container(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    """A valid object or array for ``schema`` (its container branch, if it is an anyOf)."""
    schema = _resolve(schema, root)
    branches = [_resolve(b, root) for b in schema.get("anyOf", [schema])]
    return st.one_of([instances(b, root) for b in branches if b.get("type") in ("object", "array")])


def _get(container: Any, key: str | int) -> Any:
    if isinstance(container, dict):
        return container.get(key)
    return container[key] if isinstance(key, int) and key < len(container) else None


def _put(container: Any, key: str | int, value: Any) -> None:
    if isinstance(container, dict) or (isinstance(key, int) and key < len(container)):
        container[key] = value
    else:
        container.append(value)
