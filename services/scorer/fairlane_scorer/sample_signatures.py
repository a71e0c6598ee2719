"""Who may speak for a node: the scorer's check of each node sample's signature, before
anything else reads the record (:mod:`fairlane_events.signing` has the scheme).

The key ring is read from its file at start and read again whenever the file changes
(:class:`~fairlane_runtime.reloaded_file.ReloadedFile`, at each staleness scan), so a
rotation needs no restart: add the new secret, roll the agents, drop the old one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from faust.types import Message

from fairlane_events.signing import (
    SIGNATURE_HEADER,
    parse_key_ring,
    read_key_file,
    verify,
)
from fairlane_runtime.reloaded_file import ReloadedFile

__all__ = ["REASONS", "SignatureCheck", "signature_header"]

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
        self._ring = read_key_file(path, parse_key_ring)  # at start, KeyFileError stops it
        self._file = ReloadedFile(path, parse_key_ring, self._ring, "key ring")

    def verify(self, message: Message) -> None:
        """Raises :class:`~fairlane_events.signing.SignatureError` (``reason``: one of
        REASONS) unless ``message`` is signed by its node's key."""
        verify(self._ring, message.key, message.value, signature_header(message))

    def refresh(self) -> None:
        """The ring read again if its file changed (from the staleness timer)."""
        self._ring = self._file.current()
