"""Bearer tokens from hashes and files, re-read on change, through the real app's auth."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from fairlane_scheduler.api.auth import CallerDep, TokenTable
from fairlane_scheduler.api.errors import install_error_handlers
from fairlane_scheduler.api.tokens import TokenFileError, TokenSources, parse_entry
from fairlane_scheduler.settings import SchedulerSettings


def _sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _app(settings: SchedulerSettings) -> FastAPI:
    """The scheduler's own TokenTable and error table behind one route that needs a token."""
    app = FastAPI()
    app.state.tokens = TokenTable(settings)
    install_error_handlers(app)

    @app.get("/whoami")
    async def whoami(caller: CallerDep) -> dict[str, str | None]:
        return {"namespace": caller.namespace}

    return app


async def _whoami(app: FastAPI, token: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get("/whoami", headers={"Authorization": f"Bearer {token}"})


def _replace(path: Path, text: str) -> None:
    """Write atomically, as the kubelet swaps a Secret's data."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_sha256_entry_is_the_digest_and_a_plain_token_is_hashed() -> None:
    assert parse_entry(_sha("abc")) == hashlib.sha256(b"abc").digest()
    assert parse_entry("abc") == hashlib.sha256(b"abc").digest()
    with pytest.raises(ValueError, match="64 hex digits"):
        parse_entry("sha256:beef")


async def test_hashed_tokens_in_the_settings_are_accepted() -> None:
    app = _app(
        SchedulerSettings(
            admin_token=SecretStr(_sha("root")), namespace_tokens={"team-a": SecretStr(_sha("a"))}
        )
    )
    assert (await _whoami(app, "a")).json() == {"namespace": "team-a"}
    assert (await _whoami(app, "root")).json() == {"namespace": None}
    assert (await _whoami(app, _sha("a"))).status_code == 401  # the hash is not the token


async def test_a_rotated_secret_directory_is_honoured_without_a_restart(tmp_path: Path) -> None:
    secret = tmp_path / "tokens"
    secret.mkdir()
    (secret / "team-a").write_text("old-a\n")
    (secret / "_admin").write_text(_sha("root") + "\n")
    (secret / "..data").mkdir()  # the kubelet's own entries are not namespaces
    app = _app(SchedulerSettings(tokens_dir=secret, tokens_reload_interval_s=0))
    assert (await _whoami(app, "old-a")).json() == {"namespace": "team-a"}
    assert (await _whoami(app, "root")).json() == {"namespace": None}

    _replace(secret / "team-a", "# rotated\n" + _sha("new-a") + "\n")
    (secret / "team-b").write_text("b\n")
    assert (await _whoami(app, "new-a")).json() == {"namespace": "team-a"}
    refused = await _whoami(app, "old-a")
    assert refused.status_code == 401
    assert (await _whoami(app, "b")).json() == {"namespace": "team-b"}

    (secret / "team-b").unlink()  # a namespace taken out of the Secret loses access
    assert (await _whoami(app, "b")).status_code == 401


async def test_a_rotated_json_token_file_is_honoured_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"team-a": ["old-a", "next-a"], "_admin": "root"}))
    app = _app(SchedulerSettings(tokens_file=path, tokens_reload_interval_s=0))
    assert (await _whoami(app, "old-a")).json() == {"namespace": "team-a"}
    assert (await _whoami(app, "next-a")).json() == {"namespace": "team-a"}

    _replace(path, json.dumps({"team-a": _sha("next-a"), "_admin": "root"}))
    assert (await _whoami(app, "old-a")).status_code == 401
    assert (await _whoami(app, "next-a")).json() == {"namespace": "team-a"}


async def test_a_broken_rotation_keeps_the_last_good_tokens_and_logs_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"team-a": "good-a"}))
    app = _app(SchedulerSettings(tokens_file=path, tokens_reload_interval_s=0))
    _replace(path, '{"team-a": "half-written-secret"')
    with caplog.at_level(logging.DEBUG, logger="fairlane.scheduler"):
        assert (await _whoami(app, "good-a")).json() == {"namespace": "team-a"}
        assert (await _whoami(app, "good-a")).status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per broken state, not per request
    assert "not valid JSON" in warnings[0]
    assert "half-written-secret" not in caplog.text
    assert "good-a" not in caplog.text


def test_files_are_checked_at_most_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "team-a"
    path.write_text("one")
    clock = [0.0]
    sources = TokenSources(tokens_dir=tmp_path, reload_interval_s=5.0, monotonic=lambda: clock[0])
    _replace(path, "two")
    assert sources.table() == ((parse_entry("one"), "team-a"),)
    clock[0] = 5.0
    assert sources.table() == ((parse_entry("two"), "team-a"),)


def test_a_bad_token_file_at_start_is_an_error_that_names_the_file_only(tmp_path: Path) -> None:
    (tmp_path / "team-a").write_text("sha256:not-hex-secret")
    with pytest.raises(TokenFileError) as caught:
        TokenSources(tokens_dir=tmp_path)
    assert str(tmp_path / "team-a") in str(caught.value)
    assert "not-hex-secret" not in str(caught.value)


async def test_a_service_account_token_is_refused_as_not_configured() -> None:
    app = _app(SchedulerSettings(admin_token=SecretStr("root")))
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2ln"
    refused = await _whoami(app, jwt)
    assert refused.status_code == 401
    assert "TokenReview" in refused.text
    assert "not configured" in refused.text


def test_turning_on_token_review_says_it_is_not_configured() -> None:
    with pytest.raises(ValueError, match="TokenReview is not configured"):
        SchedulerSettings(auth_disabled=True, kube_token_review=True)
