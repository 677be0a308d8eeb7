"""`stallwatch mcp-proxy` at its edges, between a real MCP client and a real server process
(tests/mcp/edge_server.py): the guard stays on whatever the server lists or the client sends,
and the server gets no secret of the proxy's."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import mcp.types as types
import pytest

from stallwatch.engine import words
from tests.mcp.edge_server import LONG_NAME
from tests.mcp.session import DOCS_SERVER, EDGE_SERVER, next_round, proxy_command, proxy_session, text

pytestmark = pytest.mark.e2e  # a real MCP client session through the proxy process


def answer(result: types.CallToolResult) -> dict:
    return json.loads(text(result))


async def test_a_tool_name_over_128_characters_is_still_guarded():
    assert len(LONG_NAME) == 129
    async with proxy_session(server=(str(EDGE_SERVER), "--long-name")) as session:
        first = await session.call_tool(LONG_NAME, {"q": "kafka"})
        await next_round()
        again = await session.call_tool(LONG_NAME, {"q": "kafka"})
    assert not first.is_error and answer(first)["tool"] == LONG_NAME
    assert again.is_error and text(again).startswith("Refused: this exact call to `lookup_xxx")


async def test_a_long_tool_name_declared_exempt_is_never_refused():
    async with proxy_session("--exempt", "lookup_*", server=(str(EDGE_SERVER), "--long-name")) as session:
        calls = []
        for _ in range(3):
            calls.append(await session.call_tool(LONG_NAME, {"q": "kafka"}))
            await next_round()
    assert not any(c.is_error for c in calls)


async def test_a_server_that_pages_tools_without_end_is_served_and_guarded():
    async with asyncio.timeout(60), proxy_session(server=(str(EDGE_SERVER), "--endless-pages")) as session:
        first = await session.call_tool("env", {"name": "HOME"})
        await next_round()
        again = await session.call_tool("env", {"name": "HOME"})
    assert not first.is_error
    assert again.is_error and text(again) == words.duplicate_call("env")


async def test_a_server_that_repeats_its_cursor_is_served_and_guarded():
    async with asyncio.timeout(30), proxy_session(server=(str(EDGE_SERVER), "--same-cursor")) as session:
        first = await session.call_tool("env", {"name": "HOME"})
        await next_round()
        again = await session.call_tool("env", {"name": "HOME"})
    assert not first.is_error and again.is_error


async def test_the_server_gets_a_safe_environment_and_the_variables_named():
    env = {
        "STALLWATCH_SASL_PASSWORD": "hunter2",
        "STALLWATCH_FINGERPRINT_KEY": "a-fleet-key-of-32-characters-ok",
        "EDGE_TOKEN": "from-the-client",
        "EDGE_UNNAMED": "stays-home",
    }
    async with proxy_session(
        "--env", "EDGE_TOKEN", "--env", "EDGE_GIVEN=on-the-command-line", env=env, server=(str(EDGE_SERVER),)
    ) as session:
        seen = {
            name: answer(await session.call_tool("env", {"name": name}))
            for name in (
                "PATH",
                "STALLWATCH_SASL_PASSWORD",
                "STALLWATCH_FINGERPRINT_KEY",
                "EDGE_UNNAMED",
                "EDGE_TOKEN",
                "EDGE_GIVEN",
            )
        }
    assert seen["PATH"]["set"]
    assert not any(
        seen[n]["set"] for n in ("STALLWATCH_SASL_PASSWORD", "STALLWATCH_FINGERPRINT_KEY", "EDGE_UNNAMED")
    )
    assert seen["EDGE_TOKEN"]["value"] == "from-the-client"
    assert seen["EDGE_GIVEN"]["value"] == "on-the-command-line"


async def test_an_env_flag_that_names_nothing_is_refused_with_one_line():
    process = await asyncio.create_subprocess_exec(
        *proxy_command("--env", "=value"),
        "--",
        sys.executable,
        str(DOCS_SERVER),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(DOCS_SERVER.parents[2]),
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2 and out == b""
    assert err.decode().strip().splitlines()[-1].startswith("stallwatch mcp-proxy: --env")


class RawClient:
    """The proxy's stdio spoken line by line, for what the SDK's client never sends."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def send(self, message: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def receive(self) -> dict:
        assert self.process.stdout is not None
        return json.loads(await asyncio.wait_for(self.process.stdout.readline(), 30))


def request(number: int, method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": number, "method": method, "params": params or {}}


async def test_a_json_rpc_batch_is_answered_with_invalid_request_and_the_session_goes_on():
    process = await asyncio.create_subprocess_exec(
        *proxy_command(),
        "--",
        sys.executable,
        str(DOCS_SERVER),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=str(DOCS_SERVER.parents[2]),
        env=dict(os.environ),
    )
    client = RawClient(process)
    try:
        await client.send(
            request(
                1,
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            )
        )
        assert (await client.receive())["id"] == 1
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await client.send([request(2, "tools/list"), request(3, "ping")])
        batch_answer = await client.receive()
        await client.send([])
        empty_answer = await client.receive()
        await client.send(request(4, "tools/list"))
        listed = await client.receive()
    finally:
        assert process.stdin is not None
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 30)
    for reply in (batch_answer, empty_answer):
        assert reply["id"] is None and reply["error"]["code"] == -32600
        assert "batch" in reply["error"]["message"]
    assert listed["id"] == 4 and "search" in [t["name"] for t in listed["result"]["tools"]]
