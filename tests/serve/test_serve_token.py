"""`stallwatch serve` on loopback without STALLWATCH_SERVE_TOKEN makes a token of its own, in a file
only this user reads: run-changing calls from any process without it are refused, this user's
hooks read it and are answered, and `--open` serves without one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator

import aiohttp
import pytest

from stallwatch.contract import serve_token
from stallwatch.serve.main import ServeOptions, serve
from stallwatch.settings import Settings
from tests.serve.test_hook_command import _hook, _payload

START = {"run_id": "r1", "mode": "coder"}


@contextlib.asynccontextmanager
async def served(options: ServeOptions) -> AsyncIterator[int]:
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(options, Settings(), bound.set_result))
    port = await asyncio.wait_for(bound, 10)
    try:
        yield port
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def post(port: int, body: dict, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/v1/runs", json=body, headers=headers) as response,
    ):
        return response.status


async def test_a_loopback_server_makes_a_token_only_its_user_reads(monkeypatch):
    monkeypatch.delenv("STALLWATCH_SERVE_TOKEN", raising=False)
    async with served(ServeOptions(port=0)) as port:
        path = serve_token.token_path(port)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert await post(port, START) == 401  # another process, without the token
        assert await post(port, START, "a guess") == 401
        assert await post(port, START, serve_token.read(port)) == 201
    assert not path.exists(), "the token goes with the server"


async def test_the_users_hooks_read_the_token_and_are_answered(monkeypatch):
    monkeypatch.delenv("STALLWATCH_SERVE_TOKEN", raising=False)
    async with served(ServeOptions(port=0)) as port:
        url = f"http://127.0.0.1:{port}"
        session = "token-session"
        first = await _hook(url, _payload(session))
        assert first.returncode == 0 and b"refused the hook" not in first.stderr, first.stderr
        again = await _hook(url, _payload(session))
        assert b'"deny"' in again.stdout, (again.stdout, again.stderr)


async def test_open_serves_any_local_process_without_a_token(monkeypatch):
    monkeypatch.delenv("STALLWATCH_SERVE_TOKEN", raising=False)
    async with served(ServeOptions(port=0, open=True)) as port:
        assert not serve_token.token_path(port).exists()
        assert await post(port, START) == 201


def test_a_token_in_a_directory_others_may_write_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(serve_token.tempfile, "gettempdir", lambda: str(tmp_path))
    serve_token.provision(9, "secret")
    assert serve_token.read(9) == "secret"
    os.chmod(serve_token.token_path(9).parent, 0o777)
    assert serve_token.read(9) is None
    with pytest.raises(PermissionError):
        serve_token.provision(9, "other")
