"""stallwatch in front of any MCP server: `stallwatch mcp-proxy` (needs the [mcp] extra)."""
