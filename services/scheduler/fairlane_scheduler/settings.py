"""The scheduler's one settings model (flags and ``FAIRLANE_*`` environment)."""

from __future__ import annotations

import re
import socket
from typing import Literal

from pydantic import AliasChoices, DirectoryPath, Field, FilePath, SecretStr, model_validator

from fairlane_runtime.settings import ServiceSettings
from fairlane_scheduler.adapters.pg_tls import SslMode
from fairlane_scheduler.core.decision import SUMMARIES_FROM_NODES
from fairlane_scheduler.core.replica_share import ReplicaShare
from fairlane_scheduler.core.sharing import SharingRule
from fairlane_scheduler.group_commit import BATCH_MAX

__all__ = ["SchedulerSettings"]


class SchedulerSettings(ServiceSettings):
    database_url: SecretStr = Field(
        SecretStr("postgresql://postgres@127.0.0.1:25432/fairlane"),
        validation_alias=AliasChoices("FAIRLANE_DATABASE_URL", "DATABASE_URL", "database_url"),
    )
    database_sslmode: SslMode | None = Field(
        None,
        description="libpq sslmode; verify-full checks the CA and the host name "
        "(default: the DSN's ?sslmode=, else asyncpg's prefer)",
    )
    database_sslrootcert: FilePath | None = Field(None, description="CA file for verify-ca/-full")
    database_sslcert: FilePath | None = Field(None, description="client certificate (mutual TLS)")
    database_sslkey: FilePath | None = Field(None, description="the client certificate's key")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    extender_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="serve the kube-scheduler extender on this port only (for a "
        "NetworkPolicy that admits only the control plane); default: on port",
    )
    max_body_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="the largest request body of the API's routes (the largest legitimate "
        "one is about 6 KiB); a larger one is answered 413 unread (docs/security.md)",
    )
    extender_max_body_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        description="the largest body of the kube-scheduler extender's routes: a pod and "
        "the names of 5,000 nodes (docs/security.md has the arithmetic)",
    )
    body_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a request's whole body must arrive within this many seconds of its "
        "headers, else 408 and the connection closed (a trickling client holds nothing)",
    )
    threshold: float = Field(0.65, ge=0, le=1, description="minimum score to place on a GPU")
    stale_after_s: float = Field(
        180.0,
        gt=0,
        description="safety net: ignore GPUs whose score record is older (> heartbeat)",
    )
    master_port_first: int = Field(29500, ge=1024, le=65535)
    master_port_last: int = Field(29999, ge=1024, le=65535)
    db_pool_max: int = Field(10, ge=1, le=100)
    group_commit_max: int = Field(
        BATCH_MAX,
        ge=1,
        le=1000,
        description="placements (or releases) one write carries; a full one leaves at once",
    )
    stale_policy: Literal["exclude", "last_known"] = Field(
        "exclude", description="GPUs without a fresh score: leave out, or use the last one"
    )
    below_threshold: Literal["fail", "best_available"] = Field(
        "fail", description="when only GPUs below the threshold fit: refuse, or take the best"
    )
    stabilization_s: float = Field(
        120.0, ge=0, description="a GPU that fell below the threshold must stay above it this long"
    )
    capacity_resolution: float = Field(
        0.1,
        ge=0,
        le=1,
        description="fastest: gangs whose slowest capacities differ by less are ties (0: exact)",
    )
    speed_resolution: float = Field(
        0.05,
        ge=0,
        le=1,
        description="jobs with a job_class: gangs in one capacity step are ranked by their "
        "slowest GPU's learned speed rounded to steps of this size (0: the capacity alone)",
    )
    degraded_speed: float = Field(
        0.85,
        ge=0,
        le=1,
        description="a running placement's GPU whose learned speed under its job class is, "
        "at the upper end of its 95 percent interval, below this is announced degraded (0: never)",
    )
    idle_threshold: float = Field(
        0.05,
        gt=0,
        le=1,
        description="a held GPU whose activity (max of SM activity and utilization, 0..1) "
        "stays under this is idle; a placement whose GPUs all are for idle_window_s is "
        "announced in an idle event",
    )
    idle_window_s: float = Field(
        600.0, gt=0, description="how long a placement's GPUs must all stay idle"
    )
    idle_check_s: float = Field(
        15.0, gt=0, description="how often running placements are checked for idleness"
    )
    replicas: int = Field(
        1,
        ge=1,
        description="scheduler replicas on this database: each prefers its own share of the "
        "nodes among equally good ones, so that they seldom take the same GPUs",
    )
    replica_index: int | None = Field(
        None,
        ge=0,
        description="this replica's index, 0 to replicas - 1 (default: with several replicas, "
        "the host name's trailing StatefulSet ordinal, as in fairlane-scheduler-2, else 0)",
    )
    summaries_from_nodes: int = Field(
        SUMMARIES_FROM_NODES,
        ge=1,
        description="decide placements from per-node summaries from this many nodes up, "
        "below it by a full scan of the fleet (the same decision; only the cost differs)",
    )
    sharing_rule: SharingRule = Field(
        "fgd",
        description="how a fractional request (gpu_share) picks its GPU: fgd packs to keep "
        "whole GPUs free for the recent mix of requests; best-fit, first-fit (core/sharing.py)",
    )
    gc_freeze: bool = Field(
        True,
        description="once the scores are caught up, freeze what is alive out of the garbage "
        "collector's walks (gc.freeze; fairlane_scheduler/heap.py says why)",
    )
    gc_gen0_threshold: int = Field(
        10_000,
        ge=1,
        description="with gc_freeze: the collector's youngest-generation threshold "
        "(Python's own is 700)",
    )
    expiry_interval_s: float = Field(
        1.0, gt=0, description="how often leases expire and pending requests are retried"
    )

    kube_api_url: str | None = Field(
        None,
        description="Kubernetes API server for the extender's pod watch and bind verb; "
        "'in-cluster': the pod's service account (docs/kubernetes.md); default: none",
    )
    kube_token_file: FilePath | None = Field(None, description="bearer token for kube_api_url")
    kube_ca_file: FilePath | None = Field(None, description="CA of kube_api_url's certificate")
    kube_device_taints: bool = Field(
        False, description="keep a DRA DeviceTaintRule on every GPU held out (needs kube_api_url)"
    )
    kube_device_taints_interval_s: float = Field(
        2.0, gt=0, description="how often the device-taint controller reconciles"
    )

    auth_disabled: bool = Field(False, description="serve without tokens (logged loudly)")
    admin_token: SecretStr | None = Field(
        None, description="bearer token (or sha256:<hex>) for every namespace"
    )
    namespace_tokens: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='{"namespace": "token"}: bearer tokens (or sha256:<hex>) per namespace',
    )
    tokens_dir: DirectoryPath | None = Field(
        None,
        description="a mounted Secret: one file per namespace (_admin: the admin), "
        "tokens or sha256:<hex>, one a line; re-read when it changes",
    )
    tokens_file: FilePath | None = Field(
        None,
        description='JSON {"namespace": "token" | ["token", ...]} (_admin: the admin); '
        "re-read when it changes",
    )
    tokens_reload_interval_s: float = Field(
        1.0, ge=0, description="how often a request may check the token files for a change"
    )
    kube_token_review: bool = Field(
        False, description="accept service-account tokens via TokenReview (not available yet)"
    )

    @model_validator(mode="after")
    def _port_range(self) -> SchedulerSettings:
        if self.master_port_first > self.master_port_last:
            raise ValueError("master_port_first must not exceed master_port_last")
        if self.extender_port == self.port:
            raise ValueError("extender_port must differ from port (or be left unset)")
        return self

    def replica_share(self) -> ReplicaShare:
        """This replica's share of the nodes (core/replica_share.py)."""
        index = self.replica_index
        if index is None:
            index = _ordinal(socket.gethostname()) if self.replicas > 1 else 0
        return ReplicaShare(self.replicas, index)

    @model_validator(mode="after")
    def _replica_in_range(self) -> SchedulerSettings:
        try:
            self.replica_share()
        except ValueError as exc:
            given = "" if self.replica_index is not None else f" (host {socket.gethostname()})"
            raise ValueError(
                f"{exc}{given}: set FAIRLANE_REPLICA_INDEX below FAIRLANE_REPLICAS"
            ) from None
        return self

    @model_validator(mode="after")
    def _kube_configured(self) -> SchedulerSettings:
        if self.kube_device_taints and self.kube_api_url is None:
            raise ValueError("kube_device_taints needs kube_api_url (or 'in-cluster')")
        if self.kube_api_url not in (None, "in-cluster") and self.kube_token_file is None:
            raise ValueError("kube_api_url needs kube_token_file (or use 'in-cluster')")
        return self

    @model_validator(mode="after")
    def _auth_configured(self) -> SchedulerSettings:
        if self.kube_token_review:
            raise ValueError(
                "kube_token_review: Kubernetes TokenReview is not configured in this build "
                "(it needs the Kubernetes control plane); use token files meanwhile"
            )
        has_tokens = (
            self.admin_token is not None
            or self.namespace_tokens
            or self.tokens_dir is not None
            or self.tokens_file is not None
        )
        if not self.auth_disabled and not has_tokens:
            raise ValueError(
                "no tokens: set FAIRLANE_ADMIN_TOKEN, FAIRLANE_NAMESPACE_TOKENS, "
                "FAIRLANE_TOKENS_DIR and/or FAIRLANE_TOKENS_FILE, "
                "or FAIRLANE_AUTH_DISABLED=true to serve without authentication"
            )
        return self


def _ordinal(hostname: str) -> int:
    """A StatefulSet pod's ordinal, the number its name ends in after a dash; else 0."""
    found = re.fullmatch(r".*-(\d+)", hostname)
    return int(found[1]) if found else 0
