"""The MCP proxy: serves stdio MCP to a client and forwards to the real server, proposing each
tool call to stallwatch first. Built on the official `mcp` SDK (the [mcp] extra)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
import orjson
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.server import Server
from mcp.server.stdio import stdio_server

from stallwatch.client import EmbeddedClient, KafkaClient
from stallwatch.client.run import Client, Run
from stallwatch.contract.envelope import envelope
from stallwatch.contract.faults import fault
from stallwatch.contract.globs import glob_matches
from stallwatch.contract.limits import MAX_DECLARATIONS_BYTES, bounded_id
from stallwatch.contract.parse import InvalidEvent, validate_event
from stallwatch.contract.policy import Policy
from stallwatch.engine import words
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import parse_json_text
from stallwatch.mcp.batches import BatchesAnswered
from stallwatch.mcp.rounds import DEFAULT_NEW_RUN_AFTER_S, DEFAULT_ROUND_GAP_S, Rounds
from stallwatch.settings import Settings

log = logging.getLogger(__name__)

# A tools/list that goes past these is a server paging without end (or a huge one): the proxy
# guards with the tools read so far. Real servers list tens of tools on one page.
MAX_TOOL_PAGES = 100
MAX_TOOLS = 1_000
TOOLS_LISTING_S = 30.0
# A variable name for `--env`: what a shell can export.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ProxyOptions:
    mode: str = "researcher"
    # Globs of tool names declared `repeat_exempt` in run_started (waits, polls).
    exempt: tuple[str, ...] = ()
    round_gap_s: float = DEFAULT_ROUND_GAP_S
    new_run_after_s: float = DEFAULT_NEW_RUN_AFTER_S
    run_prefix: str = "mcp"
    # `--env NAME` or `--env NAME=VALUE`: what the server gets beyond the SDK's safe default.
    env: tuple[str, ...] = ()


def result_view(result: types.CallToolResult) -> Any:
    """What a call's result says, for its fingerprint (it never leaves the proxy): the
    structured content when the server gives it, else each block, text holding JSON parsed."""
    if result.structured_content is not None:
        return result.structured_content
    return [
        parse_json_text(block.text)
        if isinstance(block, types.TextContent)
        else block.model_dump(mode="json", exclude={"meta"}, exclude_none=True)
        for block in result.content
    ]


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
        """Read the upstream's tool list, page by page (declared when a run starts), up to
        MAX_TOOL_PAGES pages, MAX_TOOLS tools, a cursor seen before or TOOLS_LISTING_S: past
        any of them, or when listing fails, the proxy guards with the tools read so far."""
        tools: list[types.Tool] = []
        why = await self._read_tool_pages(tools)
        if why is not None:
            log.warning(
                "the MCP server's tool list was read only in part (%s); calls are guarded all "
                "the same (%d tools read)",
                why,
                len(tools),
            )
        by_name = {t.name: t for t in reversed(tools)}  # a name listed twice: its first listing
        self.tools = [by_name[name] for name in dict.fromkeys(t.name for t in tools)][:MAX_TOOLS]

    async def _read_tool_pages(self, tools: list[types.Tool]) -> str | None:
        """Fill `tools`; returns why it stopped early, None when the list was read to its end."""
        cursors: set[str] = set()
        cursor: str | None = None
        try:
            async with asyncio.timeout(TOOLS_LISTING_S):
                for _ in range(MAX_TOOL_PAGES):
                    page = await self.upstream.list_tools(
                        params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    )
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        return None
                    if cursor in cursors:
                        return "a cursor came back a second time"
                    if len(tools) >= MAX_TOOLS:
                        return f"over {MAX_TOOLS:,} tools"
                    cursors.add(cursor)
                return f"over {MAX_TOOL_PAGES} pages"
        except TimeoutError:
            return f"still paging after {TOOLS_LISTING_S:g} s"
        except Exception as exc:  # a server without tools, or one that fails to list them
            return f"listing failed: {fault(exc)}"

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """tools/list passes through untouched; the first page refreshes what a new run declares."""
        result = await self.upstream.list_tools(params=params)
        if params is None or not params.cursor:
            known = {t.name for t in result.tools}
            self.tools = (result.tools + [t for t in self.tools if t.name not in known])[:MAX_TOOLS]
        return result

    def declarations(self) -> list[dict[str, Any]]:
        """What a run declares: the tools `--exempt` names (a plain name changes nothing in the
        engine), as many as fit in the contract's limit on declarations; a run_started over it
        would be refused and leave the run unguarded."""
        declared: list[dict[str, Any]] = []
        size = 2  # the brackets of the JSON array
        for tool in self.tools:
            if not self.is_exempt(tool.name):
                continue
            entry = {"name": tool.name, "repeat_exempt": True}
            # Measured as the parser measures it, long names bounded (the digest's length is
            # the same with or without the fleet's key).
            size += len(orjson.dumps({**entry, "name": bounded_id(tool.name)})) + 1
            if size > MAX_DECLARATIONS_BYTES:
                log.warning(
                    "only %d of the tools --exempt names are declared exempt: more would "
                    "pass the limit of %s bytes on a run's declarations",
                    len(declared),
                    f"{MAX_DECLARATIONS_BYTES:,}",
                )
                break
            declared.append(entry)
        return declared

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        """A fault of stallwatch's own (the engine, the client, a bug) stays with the call it
        happened in: that call runs unguarded, the later ones are judged again."""
        name, args = params.name, params.arguments or {}
        try:
            run, rounds = await self._current_run()
        except Exception as exc:
            return await self._unguarded(params, exc)
        # known stopped: nothing to ask, nothing to forward (a local: the stop may come meanwhile)
        if (known := run.stop) is not None:
            return error_result(known.reason)
        try:
            try:
                await rounds.call_starts()
                call_id, decision = await run.propose(name, args)
            except Exception as exc:
                return await self._unguarded(params, exc)
            if not decision.allowed:
                stop = run.stop if decision.code == "run_stopped" else None
                return error_result(stop.reason if stop is not None else decision.reason)
            try:
                result = await self.upstream.call_tool(name, params.arguments)
            except Exception:
                await self._report(run, call_id, name, None)
                raise
            await self._report(run, call_id, name, result)
            return self._with_nudges(run, result)
        finally:
            rounds.call_ends()
            self._last_call = time.monotonic()

    async def _unguarded(self, params: types.CallToolRequestParams, exc: Exception) -> types.CallToolResult:
        """stallwatch could not judge the call (the broker is away, a bug): it runs, as after a
        verdict timeout. Failing open keeps a fault of the guard from stopping every agent."""
        log.warning(
            "stallwatch could not judge a call to %s (%s); it runs unguarded", params.name, fault(exc)
        )
        return await self.upstream.call_tool(params.name, params.arguments)

    async def _report(self, run: Run, call_id: str, tool: str, result: types.CallToolResult | None) -> None:
        """Report a call's result (None: the call raised); a fault here loses only the report."""
        try:
            status = "error" if result is None or result.is_error else "ok"
            await run.result(call_id, tool, status, None if result is None else result_view(result))
        except Exception as exc:  # the model gets its result all the same
            log.warning("stallwatch could not record the result of %s (%s)", tool, fault(exc))

    async def close(self) -> None:
        """The client went away: end the open round and the run."""
        await self._end_run("session closed")

    async def _current_run(self) -> tuple[Run, Rounds]:
        async with self._run_lock:  # overlapping first calls start one run, not two
            return await self._current_run_locked()

    async def _current_run_locked(self) -> tuple[Run, Rounds]:
        quiet = time.monotonic() - self._last_call
        if (
            self.run is not None
            and self.rounds is not None
            and self.rounds.in_flight == 0
            and quiet > self.options.new_run_after_s
        ):
            await self._end_run(f"no call for {quiet:.0f} s")
        if self.run is None or self.rounds is None:
            self._runs += 1
            run_id = f"{self.options.run_prefix}-{self._session}-{self._runs}"
            try:
                self.run = await self.client.start_run(run_id, self.options.mode, self.declarations())
            except Exception:
                self.client.forget(run_id)  # the next call starts another
                raise
            self.rounds = Rounds(self.run, self.options.round_gap_s)
            self._nudges_shown = 0
        return self.run, self.rounds

    async def _end_run(self, reason: str) -> None:
        """End the open round and the run; a fault in either is logged and the run forgotten."""
        if self.run is None or self.rounds is None:
            return
        run, rounds = self.run, self.rounds
        self.run = self.rounds = None
        try:
            await rounds.close()
            await run.end(reason)
        except Exception as exc:
            log.warning("stallwatch could not end run %s (%s)", run.run_id, fault(exc))
        finally:
            self.client.forget(run.run_id)

    def is_exempt(self, tool: str) -> bool:
        """Declared `repeat_exempt` by `--exempt`; the policy file is the engine's to apply."""
        return any(glob_matches(tool, pattern) for pattern in self.options.exempt)

    def _with_nudges(self, run: Run, result: types.CallToolResult) -> types.CallToolResult:
        """MCP's only way to the model is a result: a nudge rides on the next one, once."""
        fresh = run.nudges[self._nudges_shown :]
        if not fresh:
            return result
        self._nudges_shown = len(run.nudges)
        try:
            notes = [types.TextContent(text=f"[stallwatch] {n.reason}") for n in fresh]
            return result.model_copy(update={"content": [*result.content, *notes]})
        except Exception as exc:  # the result itself still reaches the model
            log.warning("stallwatch could not add its nudge to a result (%s)", fault(exc))
            return result


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
    return Server(
        info.name,
        version=info.version,
        title=info.title,
        description=info.description,
        instructions=instructions,
        **handlers,
    )


def parse_env(specs: Iterable[str]) -> dict[str, str]:
    """`--env NAME` (its value here, when set) and `--env NAME=VALUE`; raises ValueError with
    the line to show for a spec that names no variable."""
    named: dict[str, str] = {}
    for spec in specs:
        name, given, value = spec.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"--env {spec!r} names no variable; write --env NAME or --env NAME=VALUE")
        if given:
            named[name] = value
        elif name in os.environ:
            named[name] = os.environ[name]
        else:
            log.warning("--env %s: the variable is not set here; the server starts without it", name)
    return named


def server_environment(options: ProxyOptions) -> dict[str, str]:
    """The server's environment: the MCP SDK's safe default (PATH, HOME, ...) and the variables
    named by `--env`, never the rest of the proxy's (its broker password, its fingerprint key)."""
    return get_default_environment() | parse_env(options.env)


def client_lines() -> BatchesAnswered:
    """This process's stdin as the SDK's stdio server reads it (UTF-8, undecodable bytes
    replaced), batches answered on the way."""
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    return BatchesAnswered(anyio.wrap_file(text))


async def serve_stdio(
    command: list[str], client: Client, options: ProxyOptions, env: dict[str, str] | None = None
) -> None:
    """Spawn the upstream server (in `env`, by default `server_environment(options)`), then
    serve MCP on this process's stdin and stdout until the client closes them."""
    upstream_params = StdioServerParameters(
        command=command[0], args=command[1:], env=server_environment(options) if env is None else env
    )
    async with (
        stdio_client(upstream_params, errlog=sys.stderr) as (up_read, up_write),
        ClientSession(up_read, up_write) as upstream,
    ):
        upstream_info = await upstream.initialize()
        proxy = Proxy(upstream, client, options)
        await proxy.refresh_tools()
        server = make_server(proxy, upstream_info)
        lines = client_lines()
        try:
            # The SDK types stdin as an anyio file, and only iterates its lines.
            async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
                lines.answer_on(write)
                await server.run(read, write, server.create_initialization_options())
        finally:
            with contextlib.suppress(Exception):  # the run's end is best effort at shutdown
                await proxy.close()


async def _run(
    command: list[str], options: ProxyOptions, use_kafka: bool, settings: Settings, env: dict[str, str]
) -> None:
    client: Client = KafkaClient(settings) if use_kafka else EmbeddedClient(AdminPolicy.of(settings))
    async with client:
        await serve_stdio(command, client, options, env)


def main(command: list[str], options: ProxyOptions, use_kafka: bool, settings: Settings) -> int:
    """`stallwatch mcp-proxy`: exits 0 when the client closes the session."""
    if not command:
        print("stallwatch mcp-proxy: name the server to run after --", file=sys.stderr)
        return 2
    try:
        env = server_environment(options)
    except ValueError as exc:
        print(f"stallwatch mcp-proxy: {exc}", file=sys.stderr)
        return 2
    probe = envelope("run_started", "probe", "probe", 0.0, mode=options.mode, tools=[])
    try:  # the contract decides which modes exist; say so now, not at the first call
        validate_event(probe)
    except InvalidEvent as exc:
        print(f"stallwatch mcp-proxy: mode {options.mode!r} is not accepted: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_run(command, options, use_kafka, settings, env))
    return 0
