"""Fractional requests at the API (issue 29): every malformed one gets a 422 whose error
names the field at fault, through the lean path and FastAPI's routes alike; a valid one
reaches the core request with its share and memory."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from fairlane_scheduler.api.schemas import PlacementIn
from tests.unit.test_hot_routes import TEAM, _app

BAD: list[tuple[dict[str, Any], str]] = [
    ({"gpu_share": 0}, "gpu_share"),
    ({"gpu_share": -0.5}, "gpu_share"),
    ({"gpu_share": 1.01}, "gpu_share"),
    ({"gpu_share": 0.0004}, "gpu_share"),  # rounds to 0 thousandths
    ({"gpu_share": "0.5"}, "gpu_share"),
    ({"gpu_memory_mib": 1024}, "gpu_share"),  # memory without a share
    ({"gpu_share": 0.5, "gpus_per_node": 2}, "gpus_per_node"),  # whole and fractional
    ({"gpu_share": 0.5, "nodes": 2}, "nodes"),
    ({"gpu_share": 0.5, "gpu_memory_mib": 0}, "gpu_memory_mib"),
    ({"gpu_share": 0.5, "gpu_memory_mib": 1.5}, "gpu_memory_mib"),
    ({"gpu_share": 0.5, "gpu_memory_mib": 200 * 1024}, "gpu_memory_mib"),  # above any GPU
    ({"gpu_share": 0.5, "gpu_memory_mib": 17 * 1024, "models": ["T4"]}, "gpu_memory_mib"),
]


@pytest.mark.parametrize("hot", [True, False])
async def test_a_bad_fractional_request_gets_a_422_naming_its_field(hot: bool) -> None:
    transport = httpx.ASGITransport(app=_app(hot=hot))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for fields, field in BAD:
            body = {"job_id": "j", "gpus_per_node": 1, **fields}
            answer = await client.post("/v1/placements", json=body, headers=TEAM)
            assert answer.status_code == 422, (fields, answer.text)
            assert [e["loc"] for e in answer.json()["detail"]] == [["body", field]], fields


def test_a_fractional_request_reaches_the_core_with_its_share() -> None:
    body = {"job_id": "j", "gpus_per_node": 1, "gpu_share": 0.25, "gpu_memory_mib": 16 * 1024}
    request = PlacementIn.model_validate({**body, "models": ["T4"]}).to_core("team")
    assert (request.gpu_share, request.gpu_memory_mib, request.is_fractional) == (0.25, 16384, True)
    plain = PlacementIn.model_validate({"job_id": "j", "gpus_per_node": 1})
    assert b"gpu_share" not in plain.canonical_json("team")
    assert not plain.to_core("team").is_fractional
    assert PlacementIn.model_validate(body).to_core("team").fingerprint != (
        plain.to_core("team").fingerprint
    )


def test_the_json_schema_refuses_what_the_model_refuses() -> None:
    """The request's JSON Schema (the OpenAPI document's) states the cross-field rules:
    every bad request above is invalid by it, a good one valid, so clients and fuzzers
    that trust the schema are never refused."""
    validator = Draft202012Validator(PlacementIn.model_json_schema())
    for fields, _ in BAD:
        assert not validator.is_valid({"job_id": "j", "gpus_per_node": 1, **fields}), fields
    good = {"job_id": "j", "gpus_per_node": 1, "gpu_share": 0.5, "gpu_memory_mib": 16 * 1024}
    validator.validate({**good, "models": ["T4", "H100"]})
    validator.validate({"job_id": "j", "gpus_per_node": 4, "nodes": 2})
