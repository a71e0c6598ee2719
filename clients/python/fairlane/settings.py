"""The launcher's settings: where the scheduler is, how to authenticate, and the Kafka
block every Fairlane client shares (``FAIRLANE_KAFKA_*``, ``KAFKA_BOOTSTRAP_SERVERS``:
:class:`fairlane_runtime.settings.ServiceSettings`), so the launcher can run as the
``fairlane-launcher`` principal over SASL_SSL. From the environment only; the job's
shape comes from ``fairlane run``'s flags."""

from __future__ import annotations

from pydantic import Field, FilePath, SecretStr, model_validator

from fairlane_runtime.settings import ServiceSettings, read_secret

__all__ = ["LauncherSettings"]


class LauncherSettings(ServiceSettings):
    scheduler_url: str = Field("http://127.0.0.1:8080", description="the placement API")
    token: SecretStr | None = Field(None, description="bearer token of the job's namespace")
    token_file: FilePath | None = Field(None, description="a file holding the token")
    http_timeout_s: float = Field(10.0, gt=0)
    release_timeout_s: float = Field(
        30.0, ge=0, description="keep retrying a release this long before leaving it to the lease"
    )
    progress_buffer: int = Field(
        100, ge=1, description="progress records held while Kafka is away; older ones dropped"
    )
    kafka_retry_s: float = Field(5.0, gt=0, description="wait between attempts to reach Kafka")

    @model_validator(mode="after")
    def _one_token(self) -> LauncherSettings:
        if self.token is not None and self.token_file is not None:
            raise ValueError("give FAIRLANE_TOKEN or FAIRLANE_TOKEN_FILE, not both")
        return self

    def bearer_token(self) -> str | None:
        """The token (read from its file, so call it once)."""
        secret = read_secret(self.token, self.token_file)
        return secret.get_secret_value() if secret is not None else None
