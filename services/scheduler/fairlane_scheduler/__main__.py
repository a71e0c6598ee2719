"""``fairlane-scheduler``: serve the placement API with uvicorn."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import uvicorn

from fairlane_runtime.entry import exit_with_error, load_settings
from fairlane_runtime.errors import FairlaneError
from fairlane_runtime.logging import configure_logging
from fairlane_scheduler.app import create_app
from fairlane_scheduler.errors import SchedulerError
from fairlane_scheduler.settings import SchedulerSettings

PROG = "fairlane-scheduler"


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(SchedulerSettings, argv, PROG)
    configure_logging(settings.log_level, json=settings.log_json)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep our logging setup
        lifespan="on",
    )
    server = uvicorn.Server(config)
    try:
        asyncio.run(server.serve())
    except (FairlaneError, SchedulerError) as exc:
        exit_with_error(PROG, exc)
    if not server.started:
        exit_with_error(PROG, "did not start (see the log above)")


if __name__ == "__main__":
    main()
