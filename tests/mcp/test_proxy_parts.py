"""The proxy's parts in-process, in front of the real docs server: failing open, what a result
is reduced to before its fingerprint."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from stallwatch.client import EmbeddedClient
from stallwatch.engine.canonical import fingerprint
from stallwatch.mcp.proxy import Proxy, ProxyOptions, result_view
from tests.mcp.session import DOCS_SERVER, text


@contextlib.asynccontextmanager
async def docs_server() -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=[str(DOCS_SERVER)])
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), \
                ClientSession(read, write) as session:
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


async def test_overlapping_first_calls_start_one_run():
    async with docs_server() as upstream:
        client = EmbeddedClient()
        proxy = Proxy(upstream, client, ProxyOptions(round_gap_s=0.05))
        await proxy.refresh_tools()
        results = await asyncio.gather(*(proxy.call_tool(None, call("page", cursor=c)) for c in range(3)))
        assert proxy.run is not None and list(client.fleet.runs) == [proxy.run.run_id]
        state = client.fleet.runs[proxy.run.run_id]
        await proxy.close()
    assert not any(r.is_error for r in results)
    assert (state.round, state.round_proposed, state.ended) == (1, 3, True)
    assert client.fleet.runs == {} and client.runs == {}  # forgotten once ended


def test_a_result_is_its_structured_content_or_its_blocks_with_json_text_parsed():
    spaced = types.CallToolResult(content=[types.TextContent(text='{\n  "b": 2,\n  "a": [1]\n}')])
    compact = types.CallToolResult(content=[types.TextContent(text='{"a":[1],"b":2}')])
    structured = types.CallToolResult(content=[types.TextContent(text="ignored")],
                                      structured_content={"a": [1], "b": 2})
    image = types.CallToolResult(content=[types.ImageContent(data="AAAA", mime_type="image/png")])
    assert result_view(spaced) == result_view(compact) == [{"a": [1], "b": 2}]
    assert fingerprint(result_view(spaced)) == fingerprint(result_view(compact))
    assert result_view(structured) == {"a": [1], "b": 2}
    assert result_view(image) == [{"type": "image", "data": "AAAA", "mime_type": "image/png"}]
    assert fingerprint(result_view(types.CallToolResult(content=[types.TextContent(text="")])))[1]
