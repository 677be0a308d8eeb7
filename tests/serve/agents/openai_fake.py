"""A scripted model speaking the OpenAI Responses API (SSE, `POST /v1/responses`), for Codex
run offline.

Each request is answered by the script with the next response: shell commands or a final text.
Every request's tool outputs are recorded: what the model received."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# Shell commands for one response, or a str: the final answer.
Reply = list[str] | str
Script = Callable[[int, list[dict[str, Any]]], Reply]


@dataclass
class Seen:
    turn: int
    tool_results: list[dict[str, Any]]  # {"id", "text"} per function_call_output
    request_text: str = ""  # the request's input items as JSON text: context added beside results


@dataclass
class FakeOpenAI:
    script: Script
    seen: list[Seen] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _last_calls: set[str] = field(default_factory=set)  # the call ids of the last reply

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([web.post("/v1/responses", self.responses)])
        return app

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        items = body.get("input") or []
        results = _outputs_of(items, self._last_calls)
        turn = len(self.seen)
        self.seen.append(Seen(turn, results, json.dumps(items)))
        reply = self.script(turn, results)
        response_id = f"resp_fake{next(self._ids):06d}"
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in self._events(response_id, reply):
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response

    def _events(self, response_id: str, reply: Reply) -> list[dict[str, Any]]:
        if isinstance(reply, str):
            text = {"type": "output_text", "text": reply, "annotations": []}
            items: list[dict[str, Any]] = [
                {
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "id": f"msg_fake{next(self._ids):06d}",
                    "content": [text],
                }
            ]
        else:
            items = [
                {
                    "type": "function_call",
                    "id": f"fc_fake{next(self._ids):06d}",
                    "status": "completed",
                    "call_id": f"call_fake{next(self._ids):06d}",
                    "name": "exec_command",
                    "arguments": json.dumps({"cmd": command}),
                }
                for command in reply
            ]
        self._last_calls = {item["call_id"] for item in items if "call_id" in item}
        usage = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 10,
            "output_tokens_details": None,
            "total_tokens": 20,
        }
        return [
            {"type": "response.created", "response": {"id": response_id}},
            *({"type": "response.output_item.done", "item": item} for item in items),
            {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
        ]


def _outputs_of(items: list[Any], calls: set[str]) -> list[dict[str, Any]]:
    """The outputs of the last reply's calls: what the model received from them."""
    found = []
    for item in items:
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and item.get("call_id") in calls
        ):
            output = item.get("output")
            if isinstance(output, list):  # content items
                output = "".join(str(c.get("text", "")) for c in output if isinstance(c, dict))
            found.append({"id": item["call_id"], "text": str(output)})
    return found
