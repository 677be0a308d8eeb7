"""The checked-in OpenAPI document is exactly what the models generate, and the server serves it."""

from __future__ import annotations

from pathlib import Path

from stallwatch.contract.schema import render
from stallwatch.serve.openapi import openapi

OPENAPI = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"


def test_checked_in_openapi_matches_the_models():
    assert OPENAPI.exists(), "run `make schemas` and commit the result"
    assert OPENAPI.read_bytes() == render(openapi()), (
        "schemas/openapi.json drifted from the models: run `make schemas` and commit the result"
    )


def test_every_request_body_refers_to_a_schema_it_defines():
    doc = openapi()
    defined = set(doc["components"]["schemas"])
    for path, methods in doc["paths"].items():
        for op in methods.values():
            ref = (
                op.get("requestBody", {})
                .get("content", {})
                .get("application/json", {})
                .get("schema", {})
                .get("$ref")
            )
            if ref:
                assert ref.rsplit("/", 1)[-1] in defined, path


async def test_the_server_serves_the_same_document(server):
    status, body = await server.get("/v1/openapi.json")
    assert status == 200 and body == openapi()
