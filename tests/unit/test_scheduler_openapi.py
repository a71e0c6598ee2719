"""The OpenAPI schema says what the API does: every status a route answers, an Allow
header on 405, and the GPU models the validator accepts. No server is started: the
app is built and asked without its lifespan."""

from typing import Any

import httpx
import pytest

from fairlane_events.gpu_models import CATALOG
from fairlane_scheduler.api.schemas import GPU_MODEL_NAMES, PlacementIn, QuotaIn
from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings


def _app() -> Any:
    settings = SchedulerSettings(
        database_url="postgresql://x@127.0.0.1:1/x",
        kafka_bootstrap_servers="127.0.0.1:1",
        admin_token="t",
    )
    return create_app(settings)


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    spec: dict[str, Any] = _app().openapi()
    return spec


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("post", "/v1/placements", {200, 201, 202, 400, 401, 403, 408, 409, 413, 422, 429, 503}),
        ("get", "/v1/placements", {200, 401, 403, 422, 503}),
        ("get", "/v1/placements/{placement_id}", {200, 401, 404, 422, 503}),
        ("delete", "/v1/placements/{placement_id}", {200, 401, 404, 422, 503}),
        (
            "post",
            "/v1/placements/{placement_id}/renew",
            {200, 400, 401, 404, 408, 409, 413, 422, 503},
        ),
        ("get", "/v1/nodes", {200, 401}),
        ("get", "/v1/nodes/{name}", {200, 401, 404, 422}),
        ("put", "/v1/nodes/{name}/cordon", {204, 400, 401, 403, 408, 413, 422, 503}),
        ("get", "/v1/quotas/{namespace}", {200, 401, 403, 422, 503}),
        ("put", "/v1/quotas/{namespace}", {200, 400, 401, 403, 408, 413, 422, 503}),
        ("post", "/v1/extender/filter", {200, 400, 408, 413, 422}),
    ],
)
def test_each_route_documents_the_statuses_it_answers(
    openapi: dict[str, Any], method: str, path: str, statuses: set[int]
) -> None:
    responses = openapi["paths"][path][method]["responses"]
    assert {int(s) for s in responses} == statuses
    for status in statuses & {429, 503}:
        assert "Retry-After" in responses[str(status)]["headers"]


def test_error_answers_have_one_documented_body(openapi: dict[str, Any]) -> None:
    body = openapi["paths"]["/v1/placements"]["post"]["responses"]["409"]
    assert body["description"] == "job_conflict or no_capacity"
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }


def test_gpu_models_are_a_closed_list_in_the_schema() -> None:
    models = PlacementIn.model_json_schema()["properties"]["models"]["anyOf"][0]["items"]
    assert models["enum"] == list(GPU_MODEL_NAMES)
    assert set(CATALOG) <= set(GPU_MODEL_NAMES)
    assert {s.nvml_name for s in CATALOG.values()} <= set(GPU_MODEL_NAMES)
    per_model = QuotaIn.model_json_schema()["properties"]["max_gpus_per_model"]
    assert per_model["propertyNames"]["enum"] == list(GPU_MODEL_NAMES)
    # Whatever the enum lists, the validator accepts, and it maps NVML names to keys.
    for name in GPU_MODEL_NAMES:
        PlacementIn(job_id="j", gpus_per_node=1, models=[name])
    assert QuotaIn(max_gpus_per_model={"NVIDIA H200": 2}).max_gpus_per_model == {"H200": 2}
    with pytest.raises(ValueError, match="unknown GPU model"):
        PlacementIn(job_id="j", gpus_per_node=1, models=["Voodoo5"])


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (QuotaIn, {"max_gpus_per_model": {"H100": False}}),
        (QuotaIn, {"max_gpus": "3"}),
        (PlacementIn, {"job_id": "j", "gpus_per_node": True}),
        (PlacementIn, {"job_id": "j", "gpus_per_node": 1, "queue": 1}),
    ],
)
def test_request_bodies_are_as_strict_as_their_schema(model: Any, body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="valid"):
        model.model_validate(body)
    assert PlacementIn.model_validate({"job_id": "j", "gpus_per_node": 1, "lease_s": 60})


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PATCH", "/v1/placements", "GET, POST"),
        ("PUT", "/v1/placements/00000000-0000-0000-0000-000000000000", "DELETE, GET"),
        ("POST", "/v1/nodes", "GET"),
        ("PATCH", "/v1/nodes/n1/cordon", "DELETE, PUT"),
        ("GET", "/v1/extender/filter", "POST"),
    ],
)
async def test_405_names_every_method_the_path_serves(method: str, path: str, allow: str) -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = await client.request(method, path)
    assert answer.status_code == 405
    assert answer.headers["allow"] == allow
