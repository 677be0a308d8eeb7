"""A `stallwatch serve` on a loopback port, in the test's event loop, reached over real HTTP."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from stallwatch.client import EmbeddedClient
from stallwatch.client.run import Client, Run
from stallwatch.serve.app import HOOKS, make_app
from stallwatch.serve.hooks import Hooks, HookSettings
from stallwatch.serve.service import Service


@contextlib.contextmanager
def unused_port() -> Iterator[int]:
    """A port nothing listens on, held bound (not listening) so that nothing else takes it
    meanwhile: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def bound_port(runner: web.AppRunner) -> int:
    """The port a site of `runner` started on port 0 was given."""
    return int(runner.addresses[0][1])


@dataclass
class Server:
    url: str
    http: aiohttp.ClientSession
    service: Service
    hooks: Hooks

    async def post(self, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        async with self.http.post(self.url + path, json=body, headers=headers) as response:
            return response.status, await response.json()

    async def get(self, path: str, **headers: str) -> tuple[int, Any]:
        async with self.http.get(self.url + path, headers=headers) as response:
            return response.status, await response.json()

    def session_run(self, session: str) -> Run:
        """The run a hook session's calls go to now (its id is `<session>.<nonce>.<n>`)."""
        (held,) = [h for r, h in self.service.held.items() if session_of(r) == session]
        return held.run


def session_of(run_id: str) -> str:
    return run_id.rsplit(".", 2)[0]


@contextlib.asynccontextmanager
async def running_server(
    token: str | None = None, hooks: HookSettings | None = None, client: Client | None = None
) -> AsyncIterator[Server]:
    """`client`: the engine behind the server, to share one between servers (a restart)."""
    service = Service(client or EmbeddedClient())
    app = make_app(service, token, hooks or HookSettings())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()  # the kernel's port: no race for a free one
    port = bound_port(runner)
    try:
        async with aiohttp.ClientSession() as http:
            yield Server(f"http://127.0.0.1:{port}", http, service, app[HOOKS])
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture(loop_scope="function")  # the test's own loop: the server runs in it
async def server() -> AsyncIterator[Server]:
    async with running_server() as s:
        yield s


@pytest.fixture
def make_server() -> Callable[..., Any]:
    return running_server
