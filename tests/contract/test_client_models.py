"""The client's own models of the placement API hold to the scheduler's OpenAPI schema:
the same fields, the same required ones, the same enumerations, for the request, the
answer, a node's assignment and the error body. The scheduler's app is built (never
started) to produce its schema; the client itself never imports the scheduler."""

from typing import Any

import pytest
from pydantic import BaseModel

from fairlane.models import ErrorBody, NodeAssignment, Placement, PlacementRequest
from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    settings = SchedulerSettings(
        database_url="postgresql://x@127.0.0.1:1/x",
        kafka_bootstrap_servers="127.0.0.1:1",
        admin_token="t",
    )
    schemas: dict[str, Any] = create_app(settings).openapi()["components"]["schemas"]
    return schemas


def _enums(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, set[Any]]:
    """Each property's enumerated values (through anyOf and $ref), where it has any."""
    out: dict[str, set[Any]] = {}
    for name, prop in schema["properties"].items():
        for option in prop.get("anyOf", [prop]):
            resolved = defs[option["$ref"].rsplit("/", 1)[1]] if "$ref" in option else option
            if "enum" in resolved:
                out[name] = set(resolved["enum"])
    return out


@pytest.mark.parametrize(
    ("client_model", "server_name", "mode"),
    [
        (PlacementRequest, "PlacementIn", "validation"),
        (Placement, "PlacementOut", "serialization"),
        (NodeAssignment, "NodeAssignment", "serialization"),
        (ErrorBody, "ErrorOut", "serialization"),
    ],
)
def test_client_model_matches_the_openapi_schema(
    components: dict[str, Any], client_model: type[BaseModel], server_name: str, mode: str
) -> None:
    server = components[server_name]
    ours = client_model.model_json_schema(mode=mode)  # type: ignore[arg-type]
    assert set(ours["properties"]) == set(server["properties"])
    assert set(ours.get("required", ())) == set(server.get("required", ()))
    theirs_enums = _enums(server, components)
    our_enums = _enums(ours, ours.get("$defs", {}))
    assert our_enums == {k: v for k, v in theirs_enums.items() if k != "models"}


def test_the_request_leaves_gpu_models_to_the_scheduler(components: dict[str, Any]) -> None:
    """``models`` is an enum of the catalogue on the server; the client sends names as
    given and lets the server's 422 name a wrong one (a new model needs no new client)."""
    models = components["PlacementIn"]["properties"]["models"]["anyOf"][0]
    assert "enum" in models["items"] or "$ref" in models["items"]
    assert PlacementRequest.model_json_schema()["properties"]["models"]["anyOf"][0] == {
        "items": {"type": "string"},
        "type": "array",
    }
