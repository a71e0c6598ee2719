"""Which of the broker's log dirs holds what: the scorer's changelogs on the small
filesystem, every other partition on the main dir (MoveToLogDir.java, Kafka's Admin API).

Done once the stack is up and before the load starts, while the topics hold little: a
move copies a partition's log, which on a busy machine took more than a minute later.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.servers import server_script

__all__ = ["changelog_topics", "place_changelogs"]

_MOVER = Path(__file__).with_name("MoveToLogDir.java")


def changelog_topics(app_id: str) -> list[str]:
    """The scorer's changelog topics (Faust: ``<app id>-<table>-changelog``)."""
    return [f"{app_id}-node-windows-changelog", f"{app_id}-node-allocations-changelog"]


def place_changelogs(
    bootstrap: str, kafka_env: dict[str, str], small: Path, main_dir: Path, app_id: str
) -> str:
    """Put the changelogs in ``small`` and the rest in ``main_dir``; what the mover said."""
    libs = server_script("kafka.sh", "libs", env=kafka_env).strip().splitlines()[-1]
    args = [bootstrap, str(small), str(main_dir), *changelog_topics(app_id)]
    done = subprocess.run(
        ["java", "-cp", f"{libs}/*", str(_MOVER), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"MoveToLogDir.java failed: {done.stdout}{done.stderr[-2000:]}")
    return done.stdout.strip()
