"""``fairlane-scorer``: check the topics, then run the Faust worker in this process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from faust.worker import Worker

from fairlane_events.topics import ALL_TOPICS
from fairlane_runtime.entry import exit_with_error, load_settings
from fairlane_runtime.errors import FairlaneError
from fairlane_runtime.kafka import ensure_topics
from fairlane_runtime.logging import configure_logging
from fairlane_scorer.app import create_app, scorer_topics
from fairlane_scorer.settings import ScorerSettings

PROG = "fairlane-scorer"
log = logging.getLogger("fairlane.scorer")


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(ScorerSettings, argv, PROG)
    configure_logging(settings.log_level, json=settings.log_json)
    try:
        specs = [*ALL_TOPICS, *scorer_topics(settings.app_id)]
        asyncio.run(
            ensure_topics(
                settings.kafka_bootstrap_servers, specs, security=settings.kafka_security()
            )
        )
        app = create_app(settings)  # reads the key ring: KeyFileError
    except FairlaneError as exc:
        exit_with_error(PROG, exc)
    if settings.sample_key_ring_file is None:
        log.warning("node samples are scored unsigned (FAIRLANE_ACCEPT_UNSIGNED_SAMPLES)")
    # Our logging (FAIRLANE_LOG_JSON) stays: the worker must not install its own.
    Worker(app, loglevel=settings.log_level, override_logging=False).execute_from_commandline()


if __name__ == "__main__":
    main()
