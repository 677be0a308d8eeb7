"""`stallwatch hook <agent>`: the command form forwards to the server, starts fast, fails open."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stallwatch.client import EmbeddedClient
from stallwatch.hooks.command import Unreachable, _address
from stallwatch.serve.app import make_app
from stallwatch.serve.hooks import HookSettings
from stallwatch.serve.service import Service
from tests.serve.conftest import unused_port

STALLWATCH = str(Path(sys.executable).with_name("stallwatch"))


def _payload(session: str, command: str = "grep -n foo a.py") -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": uuid.uuid4().hex,
        }
    ).encode()


async def _hook(url: str, payload: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "STALLWATCH_SERVE_URL": url}
    proc = await asyncio.create_subprocess_exec(
        STALLWATCH,
        "hook",
        "claude",
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
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
    with unused_port() as port:
        url = f"http://127.0.0.1:{port}"
        session = uuid.uuid4().hex
        first = await _hook(url, _payload(session))
        second = await _hook(url, _payload(session))
    assert first.returncode == 0 and first.stdout == b""
    assert b"tool calls run unguarded" in first.stderr and url.encode() in first.stderr
    assert second.returncode == 0 and second.stdout == b"" and second.stderr == b""


def test_the_command_imports_neither_the_engine_nor_pydantic_nor_asyncio():
    """It runs on every tool call: only the standard library's HTTP client."""
    probe = (
        "import sys; sys.argv = ['stallwatch', 'hook', 'claude']; "
        "import stallwatch.cli.main as m; sys.stdin = open(__import__('os').devnull); "
        "code = m.entry(); "
        "bad = [n for n in sys.modules if n.split('.')[0] in ('pydantic', 'asyncio', 'orjson', "
        "'aiohttp', 'xxhash') or n.startswith(('stallwatch.engine', 'stallwatch.client'))]; "
        "print(bad)"
    )
    with unused_port() as port:
        env = {**os.environ, "STALLWATCH_SERVE_URL": f"http://127.0.0.1:{port}"}
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
        )
    assert out.stdout.strip() == "[]", out.stdout


async def test_a_payload_nested_too_deep_for_json_still_fails_open():
    deep = b"[" * 100_000 + b"]" * 100_000  # json.loads raises RecursionError, not ValueError
    with unused_port() as port:
        out = await _hook(f"http://127.0.0.1:{port}", deep)
    assert out.returncode == 0 and out.stdout == b"" and b"Traceback" not in out.stderr


async def test_a_url_with_a_port_out_of_range_fails_open_in_one_line():
    out = await _hook("http://127.0.0.1:99999", _payload(uuid.uuid4().hex))
    assert out.returncode == 0 and out.stdout == b""
    assert b"Traceback" not in out.stderr and out.stderr.count(b"\n") == 1, out.stderr
    assert b"STALLWATCH_SERVE_URL" in out.stderr


def test_urls_are_parsed_with_their_default_ports_and_ipv6_hosts():
    assert _address("http://[::1]") == ("::1", 80, False)
    assert _address("https://[::1]:9443/") == ("::1", 9443, True)
    assert _address("http://localhost:8737") == ("localhost", 8737, False)
    with pytest.raises(Unreachable, match="STALLWATCH_SERVE_URL"):
        _address("ftp://127.0.0.1:21")


async def test_the_command_reaches_a_server_on_ipv6_loopback():
    from aiohttp import web

    service = Service(EmbeddedClient())
    runner = web.AppRunner(make_app(service, None, HookSettings()))
    await runner.setup()
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        port = sock.getsockname()[1]
        site = web.SockSite(runner, sock)
        await site.start()
        try:
            session = uuid.uuid4().hex
            await _hook(f"http://[::1]:{port}", _payload(session))
            again = await _hook(f"http://[::1]:{port}", _payload(session))
        finally:
            await runner.cleanup()
    assert json.loads(again.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny", again.stderr


async def test_a_wrong_token_is_said_as_such_not_as_no_server(make_server):
    async with make_server(token="s3cret-token-for-tests") as server:
        out = await _hook(server.url, _payload(uuid.uuid4().hex))
    assert out.returncode == 0 and out.stdout == b""
    assert b"STALLWATCH_SERVE_TOKEN" in out.stderr and b"no server" not in out.stderr
    assert out.stderr.count(b"\n") == 1


def test_the_command_and_the_server_name_the_same_token_variable():
    from stallwatch.hooks import command
    from stallwatch.serve import app, main
    from stallwatch.settings import ServeSettings

    assert command.TOKEN_ENV == ServeSettings.env_name("token") == app.TOKEN_ENV
    assert main.TOKEN_ENV is app.TOKEN_ENV
