"""A real MCP client session (the SDK's stdio client) talking to `stallwatch mcp-proxy`, which
runs the docs server of this folder as its upstream."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

DOCS_SERVER = Path(__file__).with_name("docs_server.py")
# Rounds in these tests are separated by twice this; calls of one round come back to back.
GAP_S = 0.25


@contextlib.asynccontextmanager
async def proxy_session(*flags: str, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    command = [sys.executable, "-m", "stallwatch.cli", "mcp-proxy", "--round-gap", str(GAP_S), *flags,
               "--", sys.executable, str(DOCS_SERVER)]
    params = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **(env or {})},
                                   cwd=str(DOCS_SERVER.parents[2]))
    with open(os.devnull, "w") as quiet:  # the docs server's log and the failing tool's traceback
        async with stdio_client(params, errlog=quiet) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
