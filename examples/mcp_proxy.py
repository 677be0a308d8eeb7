"""stallwatch in front of an MCP server: a scripted MCP client rewords one search through
`stallwatch mcp-proxy` and is refused, nudged, then stopped.

    python examples/mcp_proxy.py            # in-process engine, no broker
    python examples/mcp_proxy.py --kafka    # through Kafka and a running worker
    python examples/mcp_proxy.py --serve    # just the example MCP server, on stdio

The server here (`--serve`) has one `search` tool that returns the same documents however the
query is worded. The client is what Claude Desktop, Cursor or any MCP client would be; it
talks to the proxy exactly as it would to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.server.mcpserver import MCPServer

server = MCPServer("docs")
# The model's searches: an exact repeat of the first, then rewordings of it.
QUERIES = ["how does kafka store streams"] * 2 + [f"kafka stream storage, wording {i}" for i in range(7)]


@server.tool()
def search(query: str) -> dict:
    """Search the documentation."""
    return {
        "documents": [
            {"id": "kafka-docs", "title": "Kafka: a distributed log"},
            {"id": "faust-docs", "title": "Faust: stream processing in Python"},
        ]
    }


async def client(kafka: bool) -> None:
    proxy = [
        "-m",
        "stallwatch.cli.main",
        "mcp-proxy",
        *(["--kafka"] if kafka else []),
        "--",
        sys.executable,
        __file__,
        "--serve",
    ]
    params = StdioServerParameters(command=sys.executable, args=proxy)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        print("instructions the client adds to the system prompt:\n" + (session.instructions or ""))
        for query in QUERIES:
            result = await session.call_tool("search", {"query": query})
            shown = " | ".join(
                b.text.replace("\n", " ")[:110] for b in result.content if isinstance(b, types.TextContent)
            )
            print(f"\n{'ERROR ' if result.is_error else ''}{query!r}:\n  {shown}")
            await asyncio.sleep(1.5)  # the model "thinks": past the proxy's round gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="run the example server on stdio")
    parser.add_argument("--kafka", action="store_true", help="use Kafka and a running worker")
    args = parser.parse_args()
    if args.serve:
        server.run()
    else:
        asyncio.run(client(args.kafka))


if __name__ == "__main__":
    main()
