"""The HTTP API as an OpenAPI 3.1 document, generated from the request and response models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from stallwatch.serve.models import (
    CallVerdict,
    EndRun,
    Problem,
    ProposeCall,
    ReportResult,
    RunStarted,
    RunView,
    StartRun,
)

_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
# path, summary, request body, response, its status
_OPERATIONS: tuple[tuple[str, str, type[BaseModel] | None, type[BaseModel], int], ...] = (
    ("/v1/runs", "Start a run (run_started)", StartRun, RunStarted, 201),
    (
        "/v1/runs/{run_id}/calls",
        "Propose a call and get its verdict (call_proposed)",
        ProposeCall,
        CallVerdict,
        200,
    ),
    ("/v1/runs/{run_id}/results", "Report a call's result (call_result)", ReportResult, RunView, 200),
    ("/v1/runs/{run_id}/rounds", "Start the next round (round_started)", None, RunView, 200),
    ("/v1/runs/{run_id}/rounds/end", "End the round (round_ended)", None, RunView, 200),
    ("/v1/runs/{run_id}/end", "End the run (run_ended); the server forgets it", EndRun, RunView, 200),
)
_MODELS: tuple[type[BaseModel], ...] = (
    StartRun,
    RunStarted,
    ProposeCall,
    CallVerdict,
    ReportResult,
    EndRun,
    RunView,
    Problem,
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _errors() -> dict[str, Any]:
    said = {
        "400": "a field to change",
        "401": "a missing or wrong token",
        "403": "a web page's request (an Origin header, or a Host not loopback without a token)",
        "404": "no such run",
        "409": "the run is already started",
        "415": "a body not sent as application/json",
    }
    return {code: {"description": what, "content": _json(Problem)} for code, what in said.items()}


def openapi() -> dict[str, Any]:
    _, defs = models_json_schema(
        [(m, "validation") for m in _MODELS], ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, Any] = {}
    for path, summary, request, response, status in _OPERATIONS:
        operation: dict[str, Any] = {
            "summary": summary,
            "responses": {str(status): {"description": "done", "content": _json(response)}, **_errors()},
        }
        if "{run_id}" in path:
            operation["parameters"] = [_RUN_ID]
        if request is not None:
            operation["requestBody"] = {"required": True, "content": _json(request)}
        paths[path] = {"post": operation}
    paths["/v1/runs/{run_id}"] = {
        "get": {
            "summary": "The run: its round, its stop, the nudges no POST has answered yet (a GET "
            "leaves them so)",
            "parameters": [_RUN_ID],
            "responses": {"200": {"description": "the run", "content": _json(RunView)}, **_errors()},
        }
    }
    paths["/v1/health"] = {
        "get": {
            "summary": "The server is up, and whether verdicts come (`status`: `ok`, or `failing open` "
            "with `verdicts` saying why; no token needed)",
            "responses": {"200": {"description": "up"}},
        }
    }
    paths["/hooks/{agent}"] = {
        "post": {
            "summary": "A coding agent's hook payload (claude, codex, gemini); answers in the agent's terms",
            "parameters": [
                {
                    "name": "agent",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "enum": ["claude", "codex", "gemini"]},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {
                    "description": "the hook's answer; `{}` lets the call run",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "stallwatch serve",
            "version": "1",
            "description": "The stallwatch client's calls over HTTP: start a run, propose each "
            "call before it runs, report its result, end rounds and the run.",
        },
        "paths": paths,
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }


def main(write_dir: str | None) -> int:
    """`stallwatch schemas`: the OpenAPI document beside the contract's schemas."""
    from pathlib import Path

    from stallwatch.contract.schema import render

    if write_dir:
        Path(write_dir, "openapi.json").write_bytes(render(openapi()))
        print(f"wrote {Path(write_dir, 'openapi.json')}")
    else:
        print(render(openapi()).decode())
    return 0
