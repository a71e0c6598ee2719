"""The dashboard's dead-letter counts never stop the scheduler from starting."""

from __future__ import annotations

import pytest

from fairlane_runtime.errors import ServerUnavailableError
from fairlane_scheduler.adapters import dead_letters
from fairlane_scheduler.adapters.dead_letters import DeadLetterTally


async def test_an_unreadable_dead_letter_topic_leaves_the_counts_unavailable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def hidden(*args: object, **kwargs: object) -> None:
        # What the topic lookup says when ACLs hide the topic from this principal.
        raise ServerUnavailableError("topic fairlane.dead-letter.v1 does not exist yet")

    monkeypatch.setattr(dead_letters, "read_from_beginning", hidden)
    tally = DeadLetterTally("127.0.0.1:1")
    await tally.start()
    assert not tally.available
    assert tally.as_counters() == {}
    assert "dead-letter counts unavailable" in caplog.text
    await tally.stop()
