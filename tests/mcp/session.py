"""A real MCP client session (the SDK's stdio client) talking to `stallwatch mcp-proxy`, which
runs the docs server of this folder as its upstream."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

DOCS_SERVER = Path(__file__).with_name("docs_server.py")
EDGE_SERVER = Path(__file__).with_name("edge_server.py")
# The proxy's round gap in these tests. Rounds are separated by four times this, which leaves
# room for a machine so loaded that a process waits its turn for a while.
GAP_S = 0.2


@contextlib.asynccontextmanager
async def proxy_session(
    *flags: str,
    env: dict[str, str] | None = None,
    gap_s: float = GAP_S,
    server: tuple[str, ...] = (str(DOCS_SERVER),),
) -> AsyncIterator[ClientSession]:
    """`server`: the upstream's script and its arguments, run by this Python."""
    command = [*proxy_command(*flags, gap_s=gap_s), "--", sys.executable, *server]
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env={**os.environ, **(env or {})},
        cwd=str(DOCS_SERVER.parents[2]),
    )
    with open(os.devnull, "w") as quiet:  # the docs server's log and the failing tool's traceback
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def proxy_command(*flags: str, gap_s: float = GAP_S) -> list[str]:
    return [sys.executable, "-m", "stallwatch.cli.main", "mcp-proxy", "--round-gap", str(gap_s), *flags]


async def next_round(gap_s: float = GAP_S) -> None:
    """What a model writing its next response looks like to the proxy: a pause past the gap."""
    await asyncio.sleep(4 * gap_s)  # the thing under test: the proxy tells rounds apart by pauses


def text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
