"""The MCP SDK is loaded only by the proxy: the command line and the client stay light."""

from __future__ import annotations

import ast
import subprocess
import sys


def imported_after(statement: str, roots: tuple[str, ...]) -> list[str]:
    code = f"import sys; {statement}; print(sorted(m for m in sys.modules if m.split('.')[0] in {roots!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return ast.literal_eval(done.stdout)  # a printed list of module names


def test_the_command_line_and_the_client_load_no_mcp_sdk():
    assert (
        imported_after(
            "import stallwatch.cli.main, stallwatch.client, stallwatch.mcp.rounds",
            ("mcp", "mcp_types", "starlette", "uvicorn"),
        )
        == []
    )


def test_the_proxy_loads_the_sdk_and_no_faust():
    assert "mcp" in imported_after("import stallwatch.mcp.proxy", ("mcp", "faust"))
    assert imported_after("import stallwatch.mcp.proxy", ("faust", "mode", "prometheus_client")) == []
