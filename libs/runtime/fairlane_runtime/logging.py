"""Structured logging for every service: key=value for people, JSON for collectors."""

from __future__ import annotations

import logging
import sys

import structlog

from fairlane_runtime.log_repeats import RepeatFilter

__all__ = ["configure_logging"]


def configure_logging(level: str, *, json: bool) -> None:
    """Route structlog and stdlib logging (aiokafka, uvicorn, faust) to one stderr stream."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                renderer,
            ],
        )
    )
    # While a broker is away aiokafka logs each retry; one line a minute per message is news.
    handler.addFilter(RepeatFilter("aiokafka"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka is chatty about retriable metadata errors right after topic creation.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
