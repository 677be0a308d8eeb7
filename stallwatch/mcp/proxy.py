"""The MCP proxy: serves stdio MCP to a client and forwards to the real server, proposing each
tool call to stallwatch first. Built on the official `mcp` SDK (the [mcp] extra)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.server import Server
from mcp.server.stdio import stdio_server

from stallwatch.client import EmbeddedClient, KafkaClient
from stallwatch.client.run import Client, Run
from stallwatch.contract.envelope import envelope
from stallwatch.contract.events import Policy
from stallwatch.contract.parse import InvalidEvent, validate_event
from stallwatch.engine import words
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import parse_json_text
from stallwatch.mcp.rounds import DEFAULT_NEW_RUN_AFTER_S, DEFAULT_ROUND_GAP_S, Rounds
from stallwatch.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProxyOptions:
    mode: str = "researcher"
    # Globs of tool names declared `repeat_exempt` in run_started (waits, polls).
    exempt: tuple[str, ...] = ()
    round_gap_s: float = DEFAULT_ROUND_GAP_S
    new_run_after_s: float = DEFAULT_NEW_RUN_AFTER_S
    run_prefix: str = "mcp"


def result_view(result: types.CallToolResult) -> Any:
    """What a call's result says, for its fingerprint (it never leaves the proxy): the
    structured content when the server gives it, else each block, text holding JSON parsed."""
    if result.structured_content is not None:
        return result.structured_content
    return [parse_json_text(block.text) if isinstance(block, types.TextContent)
            else block.model_dump(mode="json", exclude={"meta"}, exclude_none=True)
            for block in result.content]


def error_result(text: str) -> types.CallToolResult:
    """A tool error the model reads: MCP's way to say a call did not run, and why."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


class Proxy:
    """One client session in front of one upstream session. A run spans the calls from the
    first one until a pause of `new_run_after_s`; see docs/decisions.md for the rounds."""

    def __init__(self, upstream: ClientSession, client: Client, options: ProxyOptions) -> None:
        self.upstream = upstream
        self.client = client
        self.options = options
        self.tools: list[types.Tool] = []
        self.run: Run | None = None
        self.rounds: Rounds | None = None
        self._runs = 0
        self._session = uuid.uuid4().hex[:8]
        self._last_call = 0.0
        self._nudges_shown = 0
        self._run_lock = asyncio.Lock()

    async def refresh_tools(self) -> None:
        """Read the upstream's whole tool list, page by page (declared when a run starts)."""
        tools: list[types.Tool] = []
        cursor = None
        while True:
            page = await self.upstream.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        """tools/list passes through untouched; the first page refreshes what a new run declares."""
        result = await self.upstream.list_tools(params=params)
        if params is None or not params.cursor:
            known = {t.name for t in result.tools}
            self.tools = result.tools + [t for t in self.tools if t.name not in known]
        return result

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, params.arguments or {}
        try:
            run, rounds = await self._current_run()
        except Exception:
            return await self._unguarded(params)
        if run.stop is not None:  # known stopped: nothing to ask, nothing to forward
            return error_result(run.stop.reason)
        try:
            try:
                await rounds.call_starts()
                call_id, decision = await run.propose(name, args)
            except Exception:
                return await self._unguarded(params)
            if not decision.allowed:
                stopped = decision.code == "run_stopped" and run.stop is not None
                return error_result(run.stop.reason if stopped else decision.reason)
            try:
                result = await self.upstream.call_tool(name, params.arguments)
            except Exception:
                await self._report(run, call_id, name, "error", None)
                raise
            await self._report(run, call_id, name, "error" if result.is_error else "ok",
                               result_view(result))
            return self._with_nudges(run, result)
        finally:
            rounds.call_ends()
            self._last_call = time.monotonic()

    async def _unguarded(self, params: types.CallToolRequestParams) -> types.CallToolResult:
        """stallwatch could not judge the call (the broker is away): it runs, as after a verdict
        timeout. Failing open keeps an outage of the guard from stopping every agent."""
        log.warning("stallwatch could not judge a call to %s; it runs unguarded", params.name,
                    exc_info=True)
        return await self.upstream.call_tool(params.name, params.arguments)

    async def _report(self, run: Run, call_id: str, tool: str, status: str, view: Any) -> None:
        try:
            await run.result(call_id, tool, status, view)
        except Exception:  # the model gets its result all the same
            log.warning("stallwatch could not record the result of %s", tool, exc_info=True)

    async def close(self) -> None:
        """The client went away: end the open round and the run."""
        await self._end_run("session closed")

    async def _current_run(self) -> tuple[Run, Rounds]:
        async with self._run_lock:  # overlapping first calls start one run, not two
            return await self._current_run_locked()

    async def _current_run_locked(self) -> tuple[Run, Rounds]:
        quiet = time.monotonic() - self._last_call
        if self.run is not None and self.rounds is not None and self.rounds.in_flight == 0 \
                and quiet > self.options.new_run_after_s:
            await self._end_run(f"no call for {quiet:.0f} s")
        if self.run is None or self.rounds is None:
            self._runs += 1
            run_id = f"{self.options.run_prefix}-{self._session}-{self._runs}"
            tools = [{"name": t.name, "repeat_exempt": True} if self.is_exempt(t.name) else {"name": t.name}
                     for t in self.tools]
            self.run = await self.client.start_run(run_id, self.options.mode, tools)
            self.rounds = Rounds(self.run, self.options.round_gap_s)
            self._nudges_shown = 0
        return self.run, self.rounds

    async def _end_run(self, reason: str) -> None:
        if self.run is None or self.rounds is None:
            return
        run, rounds = self.run, self.rounds
        self.run = self.rounds = None
        await rounds.close()
        await run.end(reason)
        self.client.forget(run.run_id)

    def is_exempt(self, tool: str) -> bool:
        """Declared `repeat_exempt` by `--exempt`; the policy file is the engine's to apply."""
        return any(fnmatchcase(tool, pattern) for pattern in self.options.exempt)

    def _with_nudges(self, run: Run, result: types.CallToolResult) -> types.CallToolResult:
        """MCP's only way to the model is a result: a nudge rides on the next one, once."""
        fresh = run.nudges[self._nudges_shown:]
        if not fresh:
            return result
        self._nudges_shown = len(run.nudges)
        notes = [types.TextContent(text=f"[stallwatch] {n.reason}") for n in fresh]
        return result.model_copy(update={"content": [*result.content, *notes]})


def make_server(proxy: Proxy, upstream_info: types.InitializeResult) -> Server:
    """A server named and described as the upstream one, with its tools, prompts and resources."""
    caps = upstream_info.capabilities
    up = proxy.upstream
    handlers: dict[str, Any] = {"on_list_tools": proxy.list_tools, "on_call_tool": proxy.call_tool}
    if caps.prompts is not None:
        handlers["on_list_prompts"] = lambda ctx, p: up.list_prompts(params=p)
        handlers["on_get_prompt"] = lambda ctx, p: up.get_prompt(p.name, p.arguments)
    if caps.resources is not None:
        handlers["on_list_resources"] = lambda ctx, p: up.list_resources(params=p)
        handlers["on_list_resource_templates"] = lambda ctx, p: up.list_resource_templates(params=p)
        handlers["on_read_resource"] = lambda ctx, p: up.read_resource(str(p.uri))
    info = upstream_info.server_info
    # Clients add a server's instructions to the system prompt: the model learns up front
    # which calls will be refused.
    exempt = [t.name for t in proxy.tools if proxy.is_exempt(t.name)]
    rules = words.system_prompt(proxy.options.mode, Policy.for_mode(proxy.options.mode), exempt)
    instructions = f"{upstream_info.instructions}\n\n{rules}" if upstream_info.instructions else rules
    return Server(info.name, version=info.version, title=info.title, description=info.description,
                  instructions=instructions, **handlers)


async def serve_stdio(command: list[str], client: Client, options: ProxyOptions) -> None:
    """Spawn the upstream server, then serve MCP on this process's stdin and stdout until the
    client closes them."""
    upstream_params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(upstream_params, errlog=sys.stderr) as (up_read, up_write), \
            ClientSession(up_read, up_write) as upstream:
        upstream_info = await upstream.initialize()
        proxy = Proxy(upstream, client, options)
        await proxy.refresh_tools()
        server = make_server(proxy, upstream_info)
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            with contextlib.suppress(Exception):  # the run's end is best effort at shutdown
                await proxy.close()


async def _run(command: list[str], options: ProxyOptions, use_kafka: bool, settings: Settings) -> None:
    client: Client = (KafkaClient(settings) if use_kafka
                      else EmbeddedClient(AdminPolicy.from_file(settings.policy_file)))
    async with client:  # type: ignore[attr-defined]  # both clients are async context managers
        await serve_stdio(command, client, options)


def main(command: list[str], options: ProxyOptions, use_kafka: bool, settings: Settings) -> int:
    """`stallwatch mcp-proxy`: exits 0 when the client closes the session."""
    if not command:
        print("stallwatch mcp-proxy: name the server to run after --", file=sys.stderr)
        return 2
    probe = envelope("run_started", "probe", "probe", 0.0, mode=options.mode, tools=[])
    try:  # the contract decides which modes exist; say so now, not at the first call
        validate_event(probe)
    except InvalidEvent as exc:
        print(f"stallwatch mcp-proxy: mode {options.mode!r} is not accepted: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_run(command, options, use_kafka, settings))
    return 0
