"""A scripted model speaking the Anthropic Messages API (SSE), for Claude Code run offline.

Each request that offers tools is answered by the script with the next response: tool calls or
a final text. Every request's tool results are recorded: what the model received."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# (tool, input) pairs for one response, or a str: the final answer.
Reply = list[tuple[str, dict[str, Any]]] | str
Script = Callable[[int, list[dict[str, Any]]], Reply]


@dataclass
class Seen:
    turn: int
    tool_results: list[dict[str, Any]]  # {"id", "text", "is_error"} per result
    request_text: str = ""  # the request's messages as JSON text: context added beside results


@dataclass
class FakeAnthropic:
    script: Script
    seen: list[Seen] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/v1/messages", self.messages),
                web.post("/v1/messages/count_tokens", self.count_tokens),
            ]
        )
        return app

    async def count_tokens(self, request: web.Request) -> web.Response:
        return web.json_response({"input_tokens": 10})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("tools"):
            results = [{"id": i, "text": t, "is_error": e} for i, t, e in _tool_results(body["messages"])]
            turn = len(self.seen)
            self.seen.append(Seen(turn, results, json.dumps(body["messages"][-1:])))
            reply = self.script(turn, results)
        else:  # Claude Code's side requests (titles, summaries): a short text
            reply = "ok"
        blocks = (
            [{"type": "text", "text": reply}]
            if isinstance(reply, str)
            else [
                {"type": "tool_use", "id": f"toolu_fake{next(self._ids):06d}", "name": tool, "input": args}
                for tool, args in reply
            ]
        )
        message_id = f"msg_fake{next(self._ids):06d}"
        stop_reason = "end_turn" if isinstance(reply, str) else "tool_use"
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "fake"),
                    "content": blocks,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 10},
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in _events(message_id, body.get("model", "fake"), blocks, stop_reason):
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response


def _events(
    message_id: str, model: str, blocks: list[dict[str, Any]], stop_reason: str
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        }
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": index, "content_block": start},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
        {"type": "message_stop"},
    ]
    return events


def _tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """The tool results in the request's last user message: what the last calls gave."""
    for message in reversed(messages):
        if message.get("role") != "user" or not isinstance(message.get("content"), list):
            continue
        found = []
        for block in message["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                content = block.get("content")
                if isinstance(content, list):
                    content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
                found.append((block.get("tool_use_id", ""), str(content), bool(block.get("is_error"))))
        if found:
            return found
        return []
    return []
