"""The settings base every service's settings model extends.

Environment variables use the ``FAIRLANE_`` prefix. ``KAFKA_BOOTSTRAP_SERVERS`` and
``DATABASE_URL`` are also read without it, because they are what the test fixtures,
docker-compose and most platforms already export.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FAIRLANE_", frozen=True, extra="ignore", cli_parse_args=False
    )

    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:19092",
        validation_alias=AliasChoices(
            "FAIRLANE_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS", "kafka_bootstrap_servers"
        ),
        description="host:port[,host:port] of the Kafka cluster",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = Field(False, description="one JSON object per log line")
