"""Who may speak for a node: the scorer's check of each node sample's signature, before
anything else reads the record (:mod:`fairlane_events.signing` has the scheme).

The key ring is read from its file at start and read again whenever the file changes
(:meth:`SignatureCheck.refresh`, from the staleness timer), so a rotation needs no
restart: add the new secret, roll the agents, drop the old one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from faust.types import Message

from fairlane_events.signing import (
    SIGNATURE_HEADER,
    KeyFileError,
    parse_key_ring,
    read_key_file,
    verify,
)

__all__ = ["REASONS", "SignatureCheck", "signature_header"]

log = logging.getLogger("fairlane.scorer")

#: Why a sample's signature was refused (the metric's labels).
REASONS = ("missing", "malformed", "unknown_key", "mismatch")


def signature_header(message: Message) -> bytes | None:
    """The record's signature header (the last one, should there be several)."""
    headers = message.headers or ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = None
    for name, value in pairs:
        if name == SIGNATURE_HEADER:
            found = value
    return found


class SignatureCheck:
    """The key ring of one file, kept current."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._ring = read_key_file(path, parse_key_ring)  # at start, KeyFileError stops it
        self._mtime_ns = path.stat().st_mtime_ns

    def verify(self, message: Message) -> None:
        """Raises :class:`~fairlane_events.signing.SignatureError` (``reason``: one of
        REASONS) unless ``message`` is signed by its node's key."""
        verify(self._ring, message.key, message.value, signature_header(message))

    def refresh(self) -> None:
        """Read the ring again if its file changed; a broken new file keeps the old ring
        (logged), so a bad edit never stops verification."""
        try:
            mtime_ns = self._path.stat().st_mtime_ns
            if mtime_ns == self._mtime_ns:
                return
            self._mtime_ns = mtime_ns
            self._ring = read_key_file(self._path, parse_key_ring)
        except (OSError, KeyFileError) as exc:
            log.error("key ring not reloaded, the previous one stays: %s", exc)
            return
        log.info("key ring reloaded from %s: key ids %s", self._path, sorted(self._ring.secrets))
