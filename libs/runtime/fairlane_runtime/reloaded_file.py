"""A file an operator edits while a service runs (a key ring, pinned bindings): its parsed
content, read again whenever the file changes, so a rotation or a re-binding needs no
restart.

A change is a new (mtime, size, inode): an edit in place, or a Kubernetes Secret's
atomic swap of its symlinked file. A new version that cannot be read or parsed keeps the
one read before and logs why, once per version: a bad edit never takes away what works.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["ReloadedFile"]

log = logging.getLogger("fairlane.runtime")

T = TypeVar("T")
_Version = tuple[int, int, int] | None  # (mtime_ns, size, inode); None: cannot be read


def _version(path: Path) -> _Version:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ReloadedFile(Generic[T]):
    """``parse(text, path name)`` of the file at ``path``, kept current by
    :meth:`current`. ``value``: what holds until a version parses (the caller may
    have read the file strictly at start, or begin with an empty default)."""

    def __init__(self, path: Path, parse: Callable[[str, str], T], value: T, what: str) -> None:
        self._path = path
        self._parse = parse
        self._what = what
        self._value = value
        self._version = _version(path)

    def current(self) -> T:
        """The content of the newest version that parsed (the file is read again only
        when it changed since the last call)."""
        version = _version(self._path)
        if version == self._version:
            return self._value
        self._version = version
        try:
            if version is None:
                raise OSError("cannot be read")
            self._value = self._parse(self._path.read_text(), str(self._path))
        except (OSError, ValueError) as exc:  # the parsers' errors are ValueErrors
            log.error("%s %s not reloaded, the previous one stays: %s", self._what, self._path, exc)
        else:
            log.info("%s reloaded from %s", self._what, self._path)
        return self._value
