"""`stallwatch hook <agent>`: the command form forwards to the server, starts fast, fails open."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.serve.conftest import free_port

STALLWATCH = str(Path(sys.executable).with_name("stallwatch"))


def _payload(session: str, command: str = "grep -n foo a.py") -> bytes:
    return json.dumps({"session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command}, "tool_use_id": uuid.uuid4().hex}).encode()


async def _hook(url: str, payload: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "STALLWATCH_SERVE_URL": url}
    proc = await asyncio.create_subprocess_exec(STALLWATCH, "hook", "claude", env=env,
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)
    out, err = await proc.communicate(payload)
    return subprocess.CompletedProcess([], proc.returncode or 0, out, err)


async def test_the_command_prints_the_servers_answer(server):
    session = uuid.uuid4().hex
    first = await _hook(server.url, _payload(session))
    assert first.returncode == 0 and first.stdout == b""  # allowed: no opinion, nothing printed
    again = await _hook(server.url, _payload(session))
    answer = json.loads(again.stdout)
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"


async def test_with_the_server_away_calls_run_and_stderr_says_so_once_per_session():
    url = f"http://127.0.0.1:{free_port()}"
    session = uuid.uuid4().hex
    first = await _hook(url, _payload(session))
    assert first.returncode == 0 and first.stdout == b""
    assert b"tool calls run unguarded" in first.stderr and url.encode() in first.stderr
    second = await _hook(url, _payload(session))
    assert second.returncode == 0 and second.stdout == b"" and second.stderr == b""


def test_the_command_imports_neither_the_engine_nor_pydantic_nor_asyncio():
    """It runs on every tool call: only the standard library's HTTP client."""
    probe = ("import sys; sys.argv = ['stallwatch', 'hook', 'claude']; "
             "import stallwatch.cli.main as m; sys.stdin = open(__import__('os').devnull); "
             "code = m.entry(); "
             "bad = [n for n in sys.modules if n.split('.')[0] in ('pydantic', 'asyncio', 'orjson', "
             "'aiohttp', 'xxhash') or n.startswith(('stallwatch.engine', 'stallwatch.client'))]; "
             "print(bad)")
    env = {**os.environ, "STALLWATCH_SERVE_URL": f"http://127.0.0.1:{free_port()}"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout
