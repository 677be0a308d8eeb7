"""A small real MCP server for the proxy's tests: a search that returns the same documents
whatever the wording, a paging tool, a wait that answers the same until it is done."""

from __future__ import annotations

import asyncio
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("docs")
DOCUMENTS = [
    {"id": "kafka-docs", "title": "Kafka: a distributed log"},
    {"id": "faust-docs", "title": "Faust: stream processing in Python"},
]


@server.tool()
def search(query: str) -> dict:
    """Search the documents: the same two come back, however the query is worded."""
    return {"documents": DOCUMENTS}


@server.tool()
def page(cursor: int) -> dict:
    """One page of a long listing: every cursor brings other items."""
    return {"items": [f"item-{cursor}-{i}" for i in range(3)], "next": cursor + 1}


@server.tool()
async def wait_for_researchers(seconds: float = 0.0) -> str:
    """Wait for the subagents: the same answer every time until they are done."""
    await asyncio.sleep(seconds)  # the thing under test: a tool that takes this long to answer
    return "still running"


@server.tool()
def fail(reason: str) -> str:
    """A tool that always fails."""
    raise ValueError(reason)


if __name__ == "__main__":
    print("docs server starting", file=sys.stderr)
    server.run()
