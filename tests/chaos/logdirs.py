"""Which of the broker's log dirs holds what: the scorer's changelogs on the small
filesystem, every other partition on the main dir (MoveToLogDir.java, Kafka's Admin API).

Done once the stack is up and before the load starts, while the topics hold little: a
move copies a partition's log, which on a busy machine took more than a minute later.

The changelogs are compacted, but Kafka compacts only closed segments, and a segment
closes at 1 GiB by default: under the suite's load the node-windows changelog grew
about 16 MiB a minute, so it filled the 64 MiB filesystem by itself some four minutes
in, long before the disk scenario, and every later row found the scorer waiting on its
changelog and every GPU stale. Small segments let the log cleaner keep the changelogs
near their live size (a few MiB), and a short delete delay gives the space of a cleaned
segment back at once (by default its file stays open for a minute: at this rate some
40 MiB), so only the disk scenario fills the filesystem.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from fairlane_runtime.kafka import kafka_admin
from tests.servers import server_script

__all__ = ["CHANGELOG_CONFIGS", "bound_changelogs", "changelog_topics", "place_changelogs"]

_MOVER = Path(__file__).with_name("MoveToLogDir.java")

#: The changelogs' topic configs on the small filesystem (all of them: AlterConfigs
#: replaces a topic's dynamic configs).
CHANGELOG_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1 << 20),
    "min.cleanable.dirty.ratio": "0.2",
    "file.delete.delay.ms": "1000",
}


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


async def bound_changelogs(bootstrap: str, app_id: str) -> None:
    """Give the changelogs :data:`CHANGELOG_CONFIGS`; raise if the broker refuses."""
    admin = await kafka_admin(bootstrap)
    try:
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, topic, configs=CHANGELOG_CONFIGS)
            for topic in changelog_topics(app_id)
        ]
        for response in await admin.alter_configs(resources):
            for code, message, _, name in response.resources:
                if code:
                    raise RuntimeError(f"AlterConfigs {name} refused: {code} {message}")
    finally:
        await admin.close()
