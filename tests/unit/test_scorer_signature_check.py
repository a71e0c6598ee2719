"""The scorer's key ring: required unless unsigned samples are accepted on purpose, and
re-read when its file changes, so a rotation needs no restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from faust.types import Message
from pydantic import ValidationError

from fairlane_events.signing import (
    SIGNATURE_HEADER,
    KeyFileError,
    RingSigner,
    SignatureError,
    parse_key_ring,
)
from fairlane_scorer.sample_signatures import SignatureCheck
from fairlane_scorer.settings import ScorerSettings

OLD = "old-1 the-old-secret-0123456789abcdef\n"
NEW = "new-1 the-new-secret-0123456789abcdef\n"
VALUE = b'{"node":"n1"}'


def _message(ring_text: str) -> Message:
    header = RingSigner(parse_key_ring(ring_text)).signature("n1", b"n1", VALUE)
    return Message("t", 0, 0, 0.0, 0, [(SIGNATURE_HEADER, header)], b"n1", VALUE, None)


def _rewrite(path: Path, text: str) -> None:
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a visible change


def test_the_scorer_needs_a_key_ring_or_an_explicit_unsigned_mode() -> None:
    with pytest.raises(ValidationError, match="FAIRLANE_SAMPLE_KEY_RING_FILE"):
        ScorerSettings()
    assert ScorerSettings(accept_unsigned_samples=True).sample_key_ring_file is None


def test_a_rotation_takes_effect_without_a_restart(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    ring.write_text(OLD)
    check = SignatureCheck(ring)
    check.verify(_message(OLD))
    with pytest.raises(SignatureError, match="unknown key id 'new-1'"):
        check.verify(_message(NEW))
    _rewrite(ring, NEW + OLD)  # the new secret joins: agents may roll
    check.refresh()
    check.verify(_message(NEW))
    check.verify(_message(OLD))
    _rewrite(ring, NEW)  # every agent rolled: the old one goes
    check.refresh()
    with pytest.raises(SignatureError, match="unknown key id 'old-1'"):
        check.verify(_message(OLD))


def test_a_broken_new_ring_keeps_the_old_one(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    ring.write_text(OLD)
    check = SignatureCheck(ring)
    _rewrite(ring, "old-1 short\n")
    check.refresh()
    check.verify(_message(OLD))


def test_a_broken_ring_at_start_stops_the_scorer(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot read"):
        SignatureCheck(tmp_path / "absent")
