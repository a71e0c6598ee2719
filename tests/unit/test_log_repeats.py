"""The repeat filter: one line per message template and window, and a count of the rest."""

from __future__ import annotations

import logging

from fairlane_runtime.log_repeats import RepeatFilter


def _record(name: str, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_a_repeated_template_passes_once_per_window_then_says_how_many_were_dropped() -> None:
    now = [0.0]
    f = RepeatFilter("aiokafka", window_s=60, clock=lambda: now[0])
    first = _record("aiokafka.conn", "Unable connect to node with id %s: %s", 1, "refused")
    assert f.filter(first)
    for t in (1.0, 2.0, 59.0):
        now[0] = t
        assert not f.filter(
            _record("aiokafka.conn", "Unable connect to node with id %s: %s", 1, "x")
        )
    now[0] = 61.0
    later = _record("aiokafka.conn", "Unable connect to node with id %s: %s", 1, "refused")
    assert f.filter(later)
    assert "(3 like this in the last 61 s)" in later.getMessage()


def test_other_messages_and_other_loggers_are_never_held_back() -> None:
    f = RepeatFilter("aiokafka", window_s=60, clock=lambda: 0.0)
    assert f.filter(_record("aiokafka.conn", "Unable connect"))
    assert f.filter(_record("aiokafka.cluster", "Unable connect"))  # another logger
    assert f.filter(_record("aiokafka.conn", "Connection closed"))  # another message
    for _ in range(3):
        assert f.filter(_record("fairlane.scheduler", "placed %s", "job"))
