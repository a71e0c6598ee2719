"""Where bearer tokens come from, and how a presented one is matched.

Three sources, merged into one table (namespace -> accepted digests; ``None`` is the admin):

- the settings (``FAIRLANE_ADMIN_TOKEN``, ``FAIRLANE_NAMESPACE_TOKENS``), fixed at start;
- ``tokens_dir``: a directory laid out like a mounted Kubernetes Secret, one file per
  namespace (the key is the file name, ``_admin`` for the admin; a namespace name cannot
  start with ``_``), entries starting with ``.`` (the kubelet's ``..data`` links) ignored;
- ``tokens_file``: one JSON object ``{"namespace": "token" | ["token", ...]}`` (``_admin``
  for the admin), e.g. one key of a Secret.

Every entry is a token or its hash, ``sha256:<64 hex digits>``; a file may hold several
(one per line, ``#`` comments), so a rotation can overlap old and new. Only SHA-256
digests are kept in memory and compared, with :func:`hmac.compare_digest` against every
entry, so neither the comparison's time nor a memory dump gives a token away.

The files are re-read when they change: at most every ``reload_interval_s`` a request
stats them (directory listing, then size, mtime and inode of each file) and rebuilds the
table when that signature moved. A file that turns unreadable or invalid keeps the last
good table, with a warning that names the file but never its content.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from fairlane_scheduler.errors import TokenFileError

__all__ = ["ADMIN_KEY", "TokenFileError", "TokenSources", "digest_of", "parse_entry"]

log = logging.getLogger("fairlane.scheduler.tokens")

ADMIN_KEY = "_admin"
_HASH = re.compile(r"^sha256:([0-9a-fA-F]{64})$")

Table = tuple[tuple[bytes, str | None], ...]
Signature = tuple[tuple[str, int, int, int], ...]


def digest_of(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_entry(entry: str) -> bytes:
    """The digest a token entry stands for: ``sha256:<hex>`` as given, else the hash."""
    entry = entry.strip()
    if not entry:
        raise ValueError("empty token")
    found = _HASH.match(entry)
    if found:
        return bytes.fromhex(found.group(1))
    if entry.lower().startswith("sha256:"):
        raise ValueError("a sha256: entry must be followed by 64 hex digits")
    return digest_of(entry)


def _namespace_of(key: str) -> str | None:
    return None if key == ADMIN_KEY else key


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _read_dir(directory: Path) -> Table:
    rows: list[tuple[bytes, str | None]] = []
    for path in _dir_entries(directory):
        try:
            entries = _lines(path.read_text())
            rows.extend((parse_entry(e), _namespace_of(path.name)) for e in entries)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"token file {path}: {_reason(exc)}") from None
    return tuple(rows)


def _read_json(path: Path) -> Table:
    try:
        mapping = json.loads(path.read_text())
        if not isinstance(mapping, dict):
            raise ValueError("expected a JSON object of namespace -> token(s)")
        rows: list[tuple[bytes, str | None]] = []
        for key, value in mapping.items():
            values = value if isinstance(value, list) else [value]
            if not all(isinstance(v, str) for v in values):
                raise ValueError(f"{key!r}: tokens must be strings")
            rows.extend((parse_entry(v), _namespace_of(str(key))) for v in values)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        # json.JSONDecodeError quotes the document: never pass its message on.
        raise TokenFileError(f"token file {path}: {_reason(exc)}") from None
    return tuple(rows)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON (line {exc.lineno})"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return str(exc)


def _dir_entries(directory: Path) -> list[Path]:
    try:
        names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except OSError as exc:
        raise TokenFileError(f"token directory {directory}: {_reason(exc)}") from None
    return [directory / n for n in names if (directory / n).is_file()]


def _signature(paths: Iterable[Path]) -> Signature:
    out: list[tuple[str, int, int, int]] = []
    for path in paths:
        try:
            st = path.stat()  # follows the kubelet's symlinks to the current data
        except OSError:
            out.append((str(path), -1, -1, -1))
        else:
            out.append((str(path), st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


@dataclass(frozen=True)
class _Loaded:
    table: Table
    signature: Signature


class TokenSources:
    """The merged token table, re-read from its files when they change."""

    def __init__(
        self,
        *,
        admin_token: SecretStr | None = None,
        namespace_tokens: Mapping[str, SecretStr] | None = None,
        tokens_dir: Path | None = None,
        tokens_file: Path | None = None,
        reload_interval_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        given: list[tuple[str, SecretStr, str | None]] = [
            (f"namespace_tokens[{ns!r}]", t, ns) for ns, t in (namespace_tokens or {}).items()
        ]
        if admin_token is not None:
            given.append(("admin_token", admin_token, None))
        fixed: list[tuple[bytes, str | None]] = []
        for name, token, namespace in given:
            try:
                fixed.append((parse_entry(token.get_secret_value()), namespace))
            except ValueError as exc:
                raise TokenFileError(f"{name}: {exc}") from None
        self._fixed: Table = tuple(fixed)
        self._dir = tokens_dir
        self._file = tokens_file
        self._interval_s = reload_interval_s
        self._monotonic = monotonic
        self._checked_at = monotonic()
        self._failed: Signature = ()
        self._loaded = self._load()  # at start a bad file is an error, not a warning

    def _watched(self) -> list[Path]:
        paths = _dir_entries(self._dir) if self._dir is not None else []
        if self._dir is not None:
            paths.insert(0, self._dir)
        return [*paths, self._file] if self._file is not None else paths

    def _load(self) -> _Loaded:
        signature = _signature(self._watched())
        table: Table = ()
        if self._dir is not None:
            table += _read_dir(self._dir)
        if self._file is not None:
            table += _read_json(self._file)
        return _Loaded(table, signature)

    def table(self) -> Table:
        """Every accepted (digest, namespace); re-read first if the files changed."""
        if self._dir is not None or self._file is not None:
            self._maybe_reload()
        return self._fixed + self._loaded.table

    def _maybe_reload(self) -> None:
        now = self._monotonic()
        if now - self._checked_at < self._interval_s:
            return
        self._checked_at = now
        signature: Signature = (("(unlistable)", -1, -1, -1),)
        try:
            signature = _signature(self._watched())
            if signature in (self._loaded.signature, self._failed):
                return
            loaded = self._load()
        except TokenFileError as exc:
            if signature != self._failed:  # warn once per broken state, not per request
                log.warning("keeping the previous tokens: %s", exc)
            self._failed = signature
            return
        self._loaded = loaded
        log.info("token files changed: %d tokens loaded", len(loaded.table))
