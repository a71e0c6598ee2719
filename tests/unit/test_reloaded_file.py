"""An operator's file kept current while the service runs (fairlane_runtime.reloaded_file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairlane_runtime.reloaded_file import ReloadedFile


def _ints(text: str, where: str) -> list[int]:
    return [int(word) for word in text.split()]  # ValueError on anything else


def _touch(path: Path, text: str, at_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(at_ns, at_ns))


def test_a_changed_file_is_read_again_and_a_broken_one_keeps_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "f"
    _touch(path, "1 2", 10**9)
    kept = ReloadedFile(path, _ints, [0], "numbers")
    assert kept.current() == [0]  # unchanged since it was opened: the caller's value
    _touch(path, "3", 2 * 10**9)
    assert kept.current() == [3]
    _touch(path, "x", 3 * 10**9)
    assert kept.current() == [3]
    assert "numbers" in caplog.text
    assert "not reloaded" in caplog.text
    path.unlink()
    assert kept.current() == [3]
    _touch(path, "4 5", 4 * 10**9)
    assert kept.current() == [4, 5]


def test_a_file_missing_at_first_is_read_once_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "later"
    kept: ReloadedFile[list[int]] = ReloadedFile(path, _ints, [], "numbers")
    assert kept.current() == []
    _touch(path, "7", 10**9)
    assert kept.current() == [7]
