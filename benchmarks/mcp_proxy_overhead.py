"""Latency of an MCP tool call through `stallwatch mcp-proxy`, against the same call made to the
server directly, from a real MCP client session over stdio.

    python benchmarks/mcp_proxy_overhead.py [--calls 300]

The server is the tests' docs server; every call asks for another page, so nothing is refused.
Prints the median and p90 per call both ways and the median difference: the proxy's own cost
(one more process and stdio hop, the SDK's parsing, and the in-process stallwatch check).
Then stallwatch's share alone: the proxy's call handler around an upstream that answers at
once, in-process (rounds, proposal, fingerprint of the result). Wall-clock on a shared
machine: indicative only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from stallwatch.client import EmbeddedClient
from stallwatch.mcp.proxy import Proxy, ProxyOptions

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, str(ROOT / "tests/mcp/docs_server.py")]
# Far past the calls' own spacing: the whole benchmark is one round, one run.
PROXY = [sys.executable, "-m", "stallwatch.cli.main", "mcp-proxy", "--round-gap", "5", "--", *SERVER]


async def latencies(command: list[str], calls: int) -> list[float]:
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))
    with open("/dev/null", "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for cursor in range(20):  # warm up
                await session.call_tool("page", {"cursor": -1 - cursor})
            out = []
            for cursor in range(calls):
                start = time.perf_counter()
                result = await session.call_tool("page", {"cursor": cursor})
                out.append(time.perf_counter() - start)
                assert not result.is_error, result
    return out


class InstantUpstream:
    """Stands in for the server session in the in-process figure: answers every call at once
    with a page like the docs server's, so only the proxy's own work is timed."""

    async def call_tool(self, name: str, arguments: dict) -> types.CallToolResult:
        page = arguments["cursor"]
        return types.CallToolResult(
            content=[
                types.TextContent(
                    text=f'{{"items": ["item-{page}-0", "item-{page}-1", "item-{page}-2"], '
                    f'"next": {page + 1}}}'
                )
            ]
        )


async def handler_latencies(calls: int) -> tuple[list[float], list[float]]:
    """The proxy's call handler, and the upstream alone, per call."""
    upstream = InstantUpstream()
    proxy = Proxy(upstream, EmbeddedClient(), ProxyOptions(round_gap_s=5.0))  # type: ignore[arg-type]
    handler, alone = [], []
    for cursor in range(calls):
        params = types.CallToolRequestParams(name="page", arguments={"cursor": cursor})
        start = time.perf_counter()
        await upstream.call_tool("page", {"cursor": cursor})
        middle = time.perf_counter()
        result = await proxy.call_tool(None, params)
        handler.append(time.perf_counter() - middle)
        alone.append(middle - start)
        assert not result.is_error
    await proxy.close()
    return handler, alone


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.9)] * 1e3


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    direct = summary(await latencies(SERVER, args.calls))
    proxied = summary(await latencies(PROXY, args.calls))
    print(f"calls: {args.calls} each way, one MCP client session over stdio")
    print(f"direct to the server:  median {direct[0]:6.2f} ms, p90 {direct[1]:6.2f} ms")
    print(f"through mcp-proxy:     median {proxied[0]:6.2f} ms, p90 {proxied[1]:6.2f} ms")
    print(f"proxy overhead:        median {proxied[0] - direct[0]:6.2f} ms per call")
    handler, alone = await handler_latencies(max(args.calls, 2000))
    print(
        f"stallwatch's share (the proxy's handler, in-process): median "
        f"{(statistics.median(handler) - statistics.median(alone)) * 1e6:6.1f} µs per call"
    )


if __name__ == "__main__":
    asyncio.run(main())
