"""Reading the evaluation's CSV inputs: one row at a time, errors that name source:line: field.

Every documented format (jobs, throughputs, variability) is a header row and one record a
line; columns the format does not name are ignored, so a user's export with extra columns
reads as it is. A malformed cell raises the caller's error class with the place it stands.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources

__all__ = ["Row", "format_number", "rows", "shipped_text", "write_rows"]


@dataclass(frozen=True)
class Row:
    """One data row of a CSV text, with where it came from for error messages."""

    source: str
    line: int
    values: Mapping[str, str]
    error: type[ValueError]

    def fail(self, field: str, problem: str) -> ValueError:
        return self.error(f"{self.source}:{self.line}: {field}: {problem}")

    def text(self, field: str, default: str | None = None) -> str:
        value = (self.values.get(field) or "").strip()
        if value:
            return value
        if default is None:
            raise self.fail(field, "missing value")
        return default

    def number(self, field: str, default: float | None = None) -> float:
        raw = self.text(field, None if default is None else repr(default))
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(field, f"not a number: {raw!r}") from None
        if not math.isfinite(value):
            raise self.fail(field, f"not finite: {raw!r}")
        return value

    def integer(self, field: str, default: int | None = None) -> int:
        raw = self.text(field, None if default is None else str(default))
        try:
            return int(raw)
        except ValueError:
            pass
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(field, f"not an integer: {raw!r}") from None
        if not value.is_integer():
            raise self.fail(field, f"not an integer: {raw!r}")
        return int(value)


def rows(
    text: str, required: tuple[str, ...], *, source: str, error: type[ValueError]
) -> Iterator[Row]:
    """The data rows of ``text`` (header first); raises ``error`` on a missing column."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")), skipinitialspace=True)
    header = [name.strip() for name in reader.fieldnames or ()]
    if not header:
        raise error(f"{source}:1: no header row (expected {','.join(required)})")
    reader.fieldnames = header
    missing = [name for name in required if name not in header]
    if missing:
        raise error(f"{source}:1: missing column(s) {', '.join(missing)} (header: {header})")
    for values in reader:
        row = Row(source, reader.line_num, values, error)
        if None in values:
            raise row.fail("(row)", f"more fields than the {len(header)} header columns")
        yield row


def format_number(value: float) -> str:
    """Shortest text that reads back to the same float ("95121" for 95121.0)."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def write_rows(header: tuple[str, ...], records: Iterator[tuple[object, ...]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for record in records:
        writer.writerow(format_number(v) if isinstance(v, float) else v for v in record)
    return out.getvalue()


def shipped_text(*parts: str) -> str:
    """A file the package ships under ``fairlane_eval/data/`` as text (gunzipped if .gz)."""
    resource = resources.files("fairlane_eval").joinpath("data", *parts)
    if parts[-1].endswith(".gz"):
        return gzip.decompress(resource.read_bytes()).decode()
    return resource.read_text()
