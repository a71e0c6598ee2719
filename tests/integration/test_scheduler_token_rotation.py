"""Token rotation on a running scheduler (real lifespan, Kafka and Postgres): a new token
file is honoured and the old token refused, without a restart."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from fairlane_scheduler.settings import SchedulerSettings
from tests.integration.test_scheduler_api import publish_scores
from tests.scheduler_harness import running_scheduler, wait_for_node

pytestmark = pytest.mark.integration


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _swap(secret: Path, key: str, text: str) -> None:
    """What the kubelet does to a mounted Secret: new data, swapped in atomically."""
    staged = secret / f"..{key}.new"
    staged.write_text(text)
    os.replace(staged, secret / key)


async def test_a_rotated_token_is_honoured_and_the_old_refused_without_restart(
    kafka_bootstrap: str, database_url: str, unique: str, tmp_path: Path
) -> None:
    node = f"rotate-{unique}"
    await publish_scores(kafka_bootstrap, node, [0.9] * 2, model="NVIDIA H200")
    secret = tmp_path / "fairlane-api-tokens"
    secret.mkdir()
    (secret / "team-a").write_text("old-token\n")
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        tokens_dir=secret,
        tokens_reload_interval_s=0,
    )
    async with running_scheduler(settings) as (http, app):
        await wait_for_node(app, node)
        job = {"job_id": f"rot-{unique}", "gpus_per_node": 1, "models": ["H200"]}
        placed = await http.post("/v1/placements", json=job, headers=_bearer("old-token"))
        assert placed.status_code == 201, placed.text
        pid = placed.json()["id"]

        new_hash = "sha256:" + hashlib.sha256(b"new-token").hexdigest()
        _swap(secret, "team-a", new_hash + "\n")

        assert (
            await http.get(f"/v1/placements/{pid}", headers=_bearer("old-token"))
        ).status_code == 401
        mine = await http.get(f"/v1/placements/{pid}", headers=_bearer("new-token"))
        assert mine.status_code == 200
        assert mine.json()["namespace"] == "team-a"
        released = await http.delete(f"/v1/placements/{pid}", headers=_bearer("new-token"))
        assert released.json()["state"] == "released"
