"""The proxy's parts in-process, in front of the real docs server: failing open, what a result
is reduced to before its fingerprint."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from stallwatch.client import EmbeddedClient
from stallwatch.contract.commands import Command
from stallwatch.contract.envelope import envelope
from stallwatch.contract.parse import validate_event
from stallwatch.engine.canonical import fingerprint
from stallwatch.mcp.proxy import MAX_TOOL_PAGES, Proxy, ProxyOptions, result_view
from tests.mcp.session import DOCS_SERVER, EDGE_SERVER, text

pytestmark = pytest.mark.e2e  # a real MCP client session through the proxy process


@contextlib.asynccontextmanager
async def docs_server(*script: str) -> AsyncIterator[ClientSession]:
    """The docs server, or `script` (a server of this folder and its arguments)."""
    params = StdioServerParameters(command=sys.executable, args=list(script) or [str(DOCS_SERVER)])
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def call(name: str, **arguments: object) -> types.CallToolRequestParams:
    return types.CallToolRequestParams(name=name, arguments=arguments)


async def test_when_stallwatch_cannot_judge_a_call_it_runs_unguarded():
    async with docs_server() as upstream:
        client = EmbeddedClient()
        proxy = Proxy(upstream, client, ProxyOptions(round_gap_s=0.05))
        await proxy.refresh_tools()

        def engine_away(event: dict) -> list:
            raise RuntimeError("the broker is away")

        client._apply = engine_away
        results = [await proxy.call_tool(None, call("page", cursor=2)) for _ in range(2)]
    # Both ran (no judge, no refusal of the repeat) and the rounds stayed balanced.
    assert [r.is_error for r in results] == [False, False] and "item-2-0" in text(results[1])
    assert proxy.rounds is not None and proxy.rounds.in_flight == 0


class FaultyOnce(EmbeddedClient):
    """The in-process engine, raising once at the first event of one kind, with a message that
    quotes the event as a careless error would."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.raised = kind, False
        handle = self.engine.handle

        def faulty(event: dict[str, Any]) -> list[Command]:
            if event["type"] == self.kind and not self.raised:
                self.raised = True
                raise RuntimeError(f"a bug, quoting {event}")
            return handle(event)

        self.engine.handle = faulty  # type: ignore[method-assign]  # run_started goes through it
        self._apply = faulty  # every other event


@pytest.mark.parametrize(
    "kind", ["run_started", "round_started", "call_proposed", "call_result", "round_ended"]
)
async def test_a_fault_of_the_guard_stays_with_its_call_and_says_only_its_type(kind, caplog):
    caplog.set_level(logging.WARNING, logger="stallwatch")
    async with docs_server() as upstream:
        client = FaultyOnce(kind)
        proxy = Proxy(upstream, client, ProxyOptions(round_gap_s=0.05))
        await proxy.refresh_tools()
        results = []
        for _ in range(3):
            results.append(await proxy.call_tool(None, call("page", cursor=2, token="s3cret")))
            await asyncio.sleep(0.25)  # past the gap: a round each
    assert client.raised
    assert not results[0].is_error and "item-2-0" in text(results[0])  # it ran
    assert results[-1].is_error and "Refused" in text(results[-1])  # the guard is on again
    assert proxy.rounds is not None and proxy.rounds.in_flight == 0
    faults = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(faults) == 1 and "RuntimeError at " in faults[0].getMessage()
    assert "s3cret" not in caplog.text and "a bug" not in caplog.text


@pytest.mark.parametrize(
    ("flag", "tools", "why"),
    [
        ("--endless-pages", MAX_TOOL_PAGES, f"over {MAX_TOOL_PAGES} pages"),
        ("--same-cursor", 1, "a cursor came back a second time"),  # its one tool, listed twice
    ],
)
async def test_a_tool_list_without_end_is_read_in_part_with_one_warning(flag, tools, why, caplog):
    caplog.set_level(logging.WARNING, logger="stallwatch")
    async with docs_server(str(EDGE_SERVER), flag) as upstream:
        proxy = Proxy(upstream, EmbeddedClient(), ProxyOptions())
        await asyncio.wait_for(proxy.refresh_tools(), 60)
    # The endless server's first page has `env`, each later one a tool of its own.
    assert len(proxy.tools) == tools and proxy.tools[0].name == "env"
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"read only in part ({why})" in warning


def test_a_run_declares_its_exempt_tools_as_many_as_the_contract_takes():
    proxy = Proxy(None, EmbeddedClient(), ProxyOptions(exempt=("wait_*",)))  # type: ignore[arg-type]
    schema = {"type": "object"}
    proxy.tools = [types.Tool(name=f"wait_{i:04}_" + "x" * 200, input_schema=schema) for i in range(1_000)]
    proxy.tools.append(types.Tool(name="search", input_schema=schema))
    declared = proxy.declarations()
    assert 0 < len(declared) < 1_000 and all(d["repeat_exempt"] for d in declared)
    started = validate_event(envelope("run_started", "r", "e", 1.0, mode="researcher", tools=declared))
    assert len(started["tools"]) == len(declared)


async def test_overlapping_first_calls_start_one_run():
    async with docs_server() as upstream:
        client = EmbeddedClient()
        proxy = Proxy(upstream, client, ProxyOptions(round_gap_s=0.05))
        await proxy.refresh_tools()
        results = await asyncio.gather(*(proxy.call_tool(None, call("page", cursor=c)) for c in range(3)))
        assert proxy.run is not None and list(client.engine.runs) == [proxy.run.run_id]
        state = client.engine.runs[proxy.run.run_id]
        await proxy.close()
    assert not any(r.is_error for r in results)
    assert (state.round, state.round_proposed, state.ended) == (1, 3, True)
    assert client.engine.runs == {} and client.runs == {}  # forgotten once ended


def test_a_result_is_its_structured_content_or_its_blocks_with_json_text_parsed():
    spaced = types.CallToolResult(content=[types.TextContent(text='{\n  "b": 2,\n  "a": [1]\n}')])
    compact = types.CallToolResult(content=[types.TextContent(text='{"a":[1],"b":2}')])
    structured = types.CallToolResult(
        content=[types.TextContent(text="ignored")], structured_content={"a": [1], "b": 2}
    )
    image = types.CallToolResult(content=[types.ImageContent(data="AAAA", mime_type="image/png")])
    assert result_view(spaced) == result_view(compact) == [{"a": [1], "b": 2}]
    assert fingerprint(result_view(spaced)) == fingerprint(result_view(compact))
    assert result_view(structured) == {"a": [1], "b": 2}
    assert result_view(image) == [{"type": "image", "data": "AAAA", "mime_type": "image/png"}]
    assert fingerprint(result_view(types.CallToolResult(content=[types.TextContent(text="")])))[1]
