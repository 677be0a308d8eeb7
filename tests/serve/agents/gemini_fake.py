"""A scripted model speaking the Gemini API (`v1beta/models/*:streamGenerateContent?alt=sse`),
for Gemini CLI run offline.

Each streamed request is answered by the script with the next response: shell commands or a
final text. Gemini CLI's router also asks `:generateContent` once per prompt for JSON of a given
schema: it gets an object filling that schema. Every request's function responses are recorded:
what the model received."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# The calls of one response (a shell command, or a tool and its arguments), or a str: the final answer.
Reply = list[str | tuple[str, dict[str, Any]]] | str
Script = Callable[[int, list[dict[str, Any]]], Reply]
USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20}


@dataclass
class Seen:
    turn: int
    tool_results: list[dict[str, Any]]  # {"id", "text"} per functionResponse, text as JSON
    request_text: str = ""  # the request's contents as JSON text: context added beside results


@dataclass
class FakeGemini:
    script: Script
    seen: list[Seen] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # paths asked for that the fake does not serve
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [web.post("/v1beta/models/{call}", self.models), web.route("*", "/{tail:.*}", self.elsewhere)]
        )
        return app

    async def elsewhere(self, request: web.Request) -> web.Response:
        self.unknown.append(request.path)
        return web.json_response({"error": {"code": 404, "message": "not in the fake"}}, status=404)

    async def models(self, request: web.Request) -> web.StreamResponse:
        _, _, method = request.match_info["call"].partition(":")
        body = await request.json()
        if method == "generateContent":
            return web.json_response(_answer([{"text": json.dumps(_filled(_schema(body)))}]))
        if method != "streamGenerateContent":
            return await self.elsewhere(request)
        contents = body.get("contents") or []
        results = _function_responses(contents)
        turn = len(self.seen)
        self.seen.append(Seen(turn, results, json.dumps(contents)))
        reply = self.script(turn, results)
        parts = (
            [{"text": reply}]
            if isinstance(reply, str)
            else [
                {"functionCall": {"name": name, "args": args, "id": f"fc_fake{next(self._ids):06d}"}}
                for name, args in map(_call, reply)
            ]
        )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"data: {json.dumps(_answer(parts))}\n\n".encode())
        await response.write_eof()
        return response


def _call(call: str | tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    if isinstance(call, str):
        return "run_shell_command", {"command": call, "description": "run it"}
    return call


def _answer(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": USAGE,
    }


def _schema(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("generationConfig") or {}
    return config.get("responseJsonSchema") or config.get("responseSchema") or {}


def _filled(schema: dict[str, Any]) -> Any:
    """The plainest value the schema accepts: an enum's first value, every property filled."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        return {name: _filled(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "fake"


def _function_responses(contents: list[Any]) -> list[dict[str, Any]]:
    """The function responses in the last user turn: what the last calls gave."""
    for content in reversed(contents):
        if not isinstance(content, dict) or content.get("role") != "user":
            continue
        found = [
            {
                "id": part["functionResponse"].get("id", ""),
                "text": json.dumps(part["functionResponse"].get("response")),
            }
            for part in content.get("parts") or []
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)
        ]
        if found:
            return found
        return []
    return []
