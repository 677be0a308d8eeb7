"""`stallwatch serve`: start the HTTP service and keep it up until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from stallwatch.client import EmbeddedClient, KafkaClient
from stallwatch.client.run import Client
from stallwatch.contract import serve_token
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.otlp.ingest import OtlpIngest
from stallwatch.serve.app import TOKEN_ENV, make_app
from stallwatch.serve.hooks import HookSettings
from stallwatch.serve.otlp import OtlpReceiver
from stallwatch.serve.service import Service
from stallwatch.settings import ServeSettings, Settings, SetupError, is_loopback, reveal

DEFAULT_PORT = 8737


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    use_kafka: bool = False
    tenant: str | None = None
    policy_file: str | None = None
    open: bool = False  # no token on loopback: any local process may call


def token_for(host: str) -> str | None:
    """The token set for requests (STALLWATCH_SERVE_TOKEN): required to bind anything but
    loopback; on loopback without one, `serve` provisions its own (stallwatch.contract.serve_token)."""
    token = reveal(ServeSettings.from_env().token)
    if token is None and not is_loopback(host):
        raise SetupError(
            f"binding {host} lets other machines in: set {TOKEN_ENV} to a long random "
            "secret (e.g. `openssl rand -hex 32`), or bind 127.0.0.1"
        )
    return token


def read_policy(path: str | None) -> dict[str, Any] | None:
    """`--policy FILE`: a JSON object of policy overrides for the agents' runs."""
    if path is None:
        return None
    try:
        policy = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SetupError(f"--policy {path}: cannot read a JSON object from it ({exc})") from None
    if not isinstance(policy, dict):
        raise SetupError(f'--policy {path}: expected a JSON object like {{"stall_stop_at": 5}}')
    return policy


def make_client(options: ServeOptions, settings: Settings) -> Client:
    if options.use_kafka:
        return KafkaClient(settings)
    return EmbeddedClient(AdminPolicy.of(settings), fingerprint_key=reveal(settings.fingerprint_key))


async def serve(
    options: ServeOptions, settings: Settings, listening: Callable[[int], None] | None = None
) -> None:
    """Serve until SIGINT or SIGTERM; `listening` is told the port once it is bound (--port 0:
    the kernel's choice)."""
    token = token_for(options.host)
    # Without a token of the operator's, a loopback server makes its own, shared with this user's
    # hooks through a file only this user reads: no other local account can end or start runs.
    provisioned: str | None = None
    if token is None and not options.open:
        token = provisioned = secrets.token_urlsafe(32)
    hook_settings = HookSettings(
        tenant=options.tenant or settings.tenant, policy=read_policy(options.policy_file)
    )
    client = make_client(options, settings)
    port: int | None = None
    async with client:
        otlp = OtlpReceiver(
            client,
            OtlpIngest(
                tenant=hook_settings.tenant,
                mode=settings.otlp_mode,
                secret=client.fingerprint_secret,
                quiet_s=settings.otlp_round_quiet_s,
                idle_s=settings.otlp_run_idle_s,
            ),
        )
        runner = web.AppRunner(make_app(Service(client), token, hook_settings, otlp), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, options.host, options.port)
            await site.start()
            port = int(runner.addresses[0][1])
            if provisioned is not None:
                serve_token.provision(port, provisioned)
            print(
                f"stallwatch serve: listening on http://{options.host}:{port}"
                f"{' (token required)' if token else ''}"
                f"{f'; its hooks read the token from {serve_token.token_path(port)}' if provisioned else ''}",
                file=sys.stderr,
                flush=True,
            )
            if listening is not None:
                listening(port)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()
            if provisioned is not None and port is not None:
                serve_token.forget(port)


def main(options: ServeOptions, settings: Settings) -> int:
    try:
        asyncio.run(serve(options, settings))
    except OSError as exc:
        print(
            f"stallwatch serve: cannot listen on {options.host}:{options.port} ({exc.strerror}): "
            "pass another --port",
            file=sys.stderr,
        )
        return 2
    return 0
