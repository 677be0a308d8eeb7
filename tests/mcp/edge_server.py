"""A real MCP server at the edges of what the proxy meets, one behaviour per flag:
`--long-name` lists a tool whose name is over 128 characters; `--endless-pages` answers every
tools/list page with a new cursor, `--same-cursor` with the cursor it was given. Every server
also has `env`, which says whether a variable is set in its environment and its value."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

LONG_NAME = "lookup_" + "x" * 122  # 129 characters
OBJECT = {"type": "object", "properties": {}, "additionalProperties": True}


def tool(name: str) -> types.Tool:
    return types.Tool(name=name, description=f"the {name} tool", input_schema=OBJECT)


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    cursor = params.cursor if params is not None else None
    page = int(cursor) if cursor and cursor.isdigit() else 0
    tools = [tool("env"), tool(LONG_NAME)] if "--long-name" in sys.argv else [tool("env")]
    if "--endless-pages" in sys.argv:
        return types.ListToolsResult(
            tools=[tool(f"page_{page}")] if page else tools, next_cursor=str(page + 1)
        )
    if "--same-cursor" in sys.argv:
        return types.ListToolsResult(tools=tools, next_cursor=cursor or "again")
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "env":
        name = str(args.get("name"))
        answer = {"name": name, "set": name in os.environ, "value": os.environ.get(name)}
    else:
        answer = {"tool": params.name, "documents": ["the same one"]}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))])


async def main() -> None:
    server = Server("edge", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(main())
