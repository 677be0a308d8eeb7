"""The HTTP JSON API over the client's calls, and the hook endpoints of coding agents (aiohttp)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from stallwatch.serve.hooks import Hooks, HookSettings
from stallwatch.serve.models import (
    CallVerdict,
    EndRun,
    Problem,
    ProposeCall,
    ReportResult,
    RunStarted,
    StartRun,
)
from stallwatch.serve.openapi import openapi
from stallwatch.serve.otlp import OtlpReceiver
from stallwatch.serve.service import RunExists, Service, UnknownRun, stop_view
from stallwatch.settings import ServeSettings

log = logging.getLogger(__name__)
Body = TypeVar("Body", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HOOKS = web.AppKey("hooks", Hooks)
# The token's variable, as its setting declares it (`stallwatch hook`, which must not import
# pydantic, spells it out; tests/serve/test_hook_command.py holds the two together).
TOKEN_ENV = ServeSettings.env_name("token")
# Requests larger than this are refused: a tool result is fingerprinted here, and the biggest
# a coding agent reports (a whole file read) stays far below it.
MAX_BODY_BYTES = 32 * 1024 * 1024


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def problem(status: int, message: str) -> web.Response:
    return web.json_response(Problem(error=message).model_dump(), status=status)


def reply(model: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(model.model_dump(mode="json"), status=status)


async def parse(request: web.Request, model: type[Body]) -> Body:
    """The request's body as `model`, or a 400 naming the first field to change."""
    raw = await request.read()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(400, f"{where}: {first['msg']}") from None


# Names that reach only this machine: any other Host is a page whose name was rebound to it.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})


def _host_name(host: str) -> str:
    """The Host header without its port: `[::1]:8737` -> `[::1]`, `localhost:1` -> `localhost`."""
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit() and (not name.startswith("[") or name.endswith("]")):
        return name.lower()
    return host.lower()


# The body types a POST may have: JSON, and OTLP's protobuf on its two paths. Neither is a type a
# page may send without the browser asking first (text/plain, a form), as no Origin is ever let in.
_JSON = frozenset({"application/json"})
_OTLP = frozenset({"application/json", "application/x-protobuf"})
_BODY_TYPES = {"/v1/traces": _OTLP, "/v1/logs": _OTLP}


def browser_refusal(request: web.Request, token: str | None) -> web.Response | None:
    """Web pages must not drive the server: a page can send a text/plain POST to any address
    without asking, and a rebound DNS name makes the server its own origin. Browsers send Origin
    on every cross-origin request and every POST; agents' hooks and local clients never do."""
    if "Origin" in request.headers:
        return problem(
            403,
            "requests with an Origin header (from a web page) are refused: call "
            "stallwatch serve from an agent's hook or a local client",
        )
    host = request.headers.get("Host")
    if token is None and host is not None and _host_name(host) not in LOOPBACK_HOSTS:
        return problem(
            403,
            f"Host {host!r} is not loopback: use http://127.0.0.1, or set {TOKEN_ENV} to answer other names",
        )
    if (
        request.method == "POST"
        and request.can_read_body
        and request.content_type not in _BODY_TYPES.get(request.path, _JSON)
    ):
        return problem(415, "send the body with `Content-Type: application/json`")
    return None


def auth_middleware(token: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
    """No requests from web pages; with a token, every request but /v1/health needs
    `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode() if token else b""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = browser_refusal(request, token)
        if refused is not None:
            return refused
        if token and request.path != "/v1/health":
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return problem(401, f"send the header `Authorization: Bearer ${TOKEN_ENV}`")
        try:
            return await handler(request)
        except BadRequest as exc:
            return problem(exc.status, str(exc))
        except UnknownRun as exc:
            return problem(404, f"no run {exc.args[0]!r} here: start it with POST /v1/runs")
        except RunExists as exc:
            return problem(409, f"run {exc.args[0]!r} is already started: end it or use another run_id")

    return middleware


class Api:
    """One handler per call of the client: start, propose, result, rounds, end."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def start_run(self, request: web.Request) -> web.Response:
        body = await parse(request, StartRun)
        await self.service.sweep()
        tools = [t.model_dump(exclude_defaults=True) for t in body.tools]
        async with self.service.locked(body.run_id):
            try:
                held = await self.service.start(
                    body.run_id,
                    mode=body.mode,
                    tools=tools,
                    policy=body.policy,
                    parent_run_id=body.parent_run_id,
                    tenant=body.tenant,
                )
            except ValueError as exc:  # the contract refused run_started (an unknown mode, a bad policy)
                if isinstance(exc, RunExists):
                    raise
                raise BadRequest(400, _one_line(exc)) from None
        return reply(RunStarted(run_id=body.run_id, system_prompt=held.run.system_prompt()), 201)

    async def propose(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        body = await parse(request, ProposeCall)
        async with self.service.locked(run_id):
            run = self.service.get(run_id).run
            call_id, decision = await run.propose(body.tool, body.args, body.call_id, body.effect)
        return reply(
            CallVerdict(
                call_id=call_id,
                allowed=decision.allowed,
                code=decision.code,
                reason=decision.reason,
                timed_out=decision.timed_out,
                stop=stop_view(run.stop),
                would_code=decision.would_code,
                would_reason=decision.would_reason,
            )
        )

    async def result(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        body = await parse(request, ReportResult)
        async with self.service.locked(run_id):
            held = self.service.get(run_id)
            await held.run.result(body.call_id, body.tool, body.status, body.result, body.send_content)
            return reply(self.service.view(held))

    async def start_round(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        async with self.service.locked(run_id):
            held = self.service.get(run_id)
            await held.run.start_round()
            return reply(self.service.view(held))

    async def end_round(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        async with self.service.locked(run_id):
            held = self.service.get(run_id)
            await held.run.end_round()
            return reply(self.service.view(held))

    async def end_run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        body = await parse(request, EndRun)
        async with self.service.locked(run_id):
            held = await self.service.end(run_id, body.reason)
            return reply(self.service.view(held))

    async def get_run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        async with self.service.locked(run_id):
            return reply(self.service.view(self.service.get(run_id), mark_read=False))

    async def health(self, request: web.Request) -> web.Response:
        # Up whatever the verdicts do (a sidecar taken out of service would fail its agents open
        # all the same); "status" says whether calls are judged.
        said = self.service.client.health()
        failing = str(said.get("verdicts", "")).startswith("failing open")
        return web.json_response(
            {"status": "failing open" if failing else "ok", "runs": len(self.service.held), **said}
        )

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi())


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def make_app(
    service: Service, token: str | None, hook_settings: HookSettings, otlp: OtlpReceiver | None = None
) -> web.Application:
    api = Api(service)
    hooks = Hooks(service, hook_settings)
    app = web.Application(middlewares=[auth_middleware(token)], client_max_size=MAX_BODY_BYTES)
    app[HOOKS] = hooks
    if otlp is not None:  # OTLP/HTTP in, observe-only
        app.add_routes(otlp.routes())
        app.on_startup.append(otlp.start)
        app.on_cleanup.append(otlp.stop)
    app.add_routes(
        [
            web.get("/v1/health", api.health),
            web.get("/v1/openapi.json", api.openapi),
            web.post("/v1/runs", api.start_run),
            web.get("/v1/runs/{run_id}", api.get_run),
            web.post("/v1/runs/{run_id}/calls", api.propose),
            web.post("/v1/runs/{run_id}/results", api.result),
            web.post("/v1/runs/{run_id}/rounds", api.start_round),
            web.post("/v1/runs/{run_id}/rounds/end", api.end_round),
            web.post("/v1/runs/{run_id}/end", api.end_run),
            web.post("/hooks/{agent}", hooks.handle),
        ]
    )
    return app
