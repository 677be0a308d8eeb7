"""Coding agents' hooks as the client's calls: a session is a run, a hook a proposal or a result.

Rounds (docs/decisions.md, "Coding agents through their hooks"): one model response is one
round. Claude Code's transcript says which response a call belongs to (`message.id`); Codex and
Gemini CLI fire a hook per model request. Without either, the MCP proxy's gap rule applies:
calls in flight together, or within the gap of the last one ending, share a round. A round
ends when the next one starts (or at the next model request): a stop can only reach the agent
at its next hook anyway."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from stallwatch.contract.faults import fault
from stallwatch.mcp.rounds import DEFAULT_ROUND_GAP_S
from stallwatch.serve.agents import AGENTS, Agent
from stallwatch.serve.service import Held, Service

log = logging.getLogger(__name__)
# How long a hook waits for its call to appear in Claude Code's transcript (the line can lag
# the hook by tens of milliseconds), and how often it looks.
TRANSCRIPT_WAIT_S = 0.5
TRANSCRIPT_POLL_S = 0.02
# The most of a transcript read at one look: far more than Claude Code appends between two hooks.
TRANSCRIPT_READ_BYTES = 1 << 20
# A call whose result never comes (a permission denial, an interrupt, Codex's shell apply_patch)
# stops counting as in flight this long after it was allowed: the longest a coding agent lets
# one shell command run (Claude Code's Bash timeout is at most 10 minutes).
PENDING_LAPSE_S = 600.0


@dataclass(frozen=True)
class HookSettings:
    """What the server decides for every agent session (the agent does not say)."""

    mode: str = "coder"
    tenant: str | None = None
    policy: dict[str, Any] | None = None
    round_gap_s: float = DEFAULT_ROUND_GAP_S
    transcript_wait_s: float = TRANSCRIPT_WAIT_S
    pending_lapse_s: float = PENDING_LAPSE_S
    clock: Callable[[], float] = time.monotonic  # what rounds are timed by


@dataclass
class RoundKeeper:
    """Which round a new call belongs to, by a response key when there is one, else by gap."""

    gap_s: float
    lapse_s: float = PENDING_LAPSE_S
    open: bool = False
    key: str | None = None
    last_activity: float = 0.0
    # The agent's call key -> (stallwatch's call id, when it was allowed) of each call in
    # flight under it, oldest first.
    calls: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    # A model request was seen: from then on only model requests end rounds.
    by_model_requests: bool = False

    @property
    def in_flight(self) -> int:
        return sum(len(waiting) for waiting in self.calls.values())

    def is_new_round(self, key: str | None, now: float) -> bool:
        if not self.open:
            return True
        if self.by_model_requests:
            return False
        if key is not None:
            return key != self.key
        return self.in_flight == 0 and now - self.last_activity > self.gap_s

    def allowed(self, call_key: str, call_id: str, now: float) -> None:
        self.calls.setdefault(call_key, []).append((call_id, now))

    def finished(self, call_key: str) -> str | None:
        """The call id a result belongs to: the oldest in flight under its key."""
        waiting = self.calls.get(call_key)
        if not waiting:
            return None
        call_id, _ = waiting.pop(0)
        if not waiting:
            del self.calls[call_key]
        return call_id

    def drop_lapsed(self, now: float) -> None:
        """Calls allowed longer ago than `lapse_s` are no longer waited for."""
        for call_key in list(self.calls):
            waiting = [c for c in self.calls[call_key] if now - c[1] <= self.lapse_s]
            if waiting:
                self.calls[call_key] = waiting
            else:
                del self.calls[call_key]


class ClaudeTranscript:
    """Reads a Claude Code transcript as it grows: which response (`message.id`) holds each
    tool call. Only ids are kept, each until its call is looked up; the content is never stored.

    The path comes from the payload, so it is read only if it is a regular file (a FIFO would
    block), in a thread, at most TRANSCRIPT_READ_BYTES per look; a new reader starts that far
    from the end (the calls it is asked about are being written now, not in an old session's
    history), and a line longer than a read is skipped."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0  # where the next read starts
        self._read_yet = False
        self.bytes_read = 0
        self.regular = True  # False once the path is seen to be anything but a regular file
        self.response_of: dict[str, str] = {}
        self._in_long_line = False
        self._lock = asyncio.Lock()  # one read at a time: reads share the offset

    def read_new(self) -> None:
        """Blocking: run it in a thread."""
        chunk = self._next_chunk()
        if not chunk:
            return
        if self._in_long_line:
            newline = chunk.find(b"\n")
            if newline < 0:
                self.offset += len(chunk)
                return
            self._in_long_line = False
            self.offset += newline + 1
            chunk = chunk[newline + 1 :]
        end = chunk.rfind(b"\n") + 1  # a line being written is read next time, whole
        if end == 0 and len(chunk) >= TRANSCRIPT_READ_BYTES:
            self._in_long_line = True  # too long to be read whole: none of our ids is kept
            end = len(chunk)
        self.offset += end
        for line in chunk[:end].splitlines():
            self._take(line)

    def _next_chunk(self) -> bytes | None:
        try:
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                self.regular = False
                return None
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there since: no wait
        except OSError:
            return None  # not there yet: Claude Code may still be creating it
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                self.regular = False
                return None
            size = status.st_size
            if not self._read_yet:
                self._read_yet = True
                self.offset = max(size - TRANSCRIPT_READ_BYTES, 0)
                self._in_long_line = self.offset > 0  # the first line is read from its middle
            elif size < self.offset:  # the file was rewritten
                self.offset, self._in_long_line = 0, False
            chunk = os.pread(fd, min(size - self.offset, TRANSCRIPT_READ_BYTES), self.offset)
        except OSError:
            return None
        finally:
            os.close(fd)
        self.bytes_read += len(chunk)
        return chunk

    def _take(self, line: bytes) -> None:
        if b'"tool_use"' not in line:
            return
        try:
            entry = orjson.loads(line)
            message = entry["message"]
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    self.response_of[block["id"]] = message["id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return

    async def response(self, tool_use_id: str, wait_s: float) -> str | None:
        deadline = time.monotonic() + wait_s
        while True:
            async with self._lock:
                found = self.response_of.pop(tool_use_id, None)
                if found is None and self.regular:
                    await asyncio.to_thread(self.read_new)
                    found = self.response_of.pop(tool_use_id, None)
            if found is not None or not self.regular or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(TRANSCRIPT_POLL_S)


@dataclass
class SessionRun:
    """The run a session's hooks go to now."""

    run_id: str
    started: bool = False


class Hooks:
    """POST /hooks/{agent}: the agent's hook payload in, the agent's hook answer out. Anything
    unexpected answers `{}` (no opinion: the call runs), as the agents do when a hook fails.

    A run id is `<session>.<nonce>.<n>`: the nonce is new at every server start and `n` is never
    reused in one server's life. The detector (a worker behind Kafka) outlives the server and
    remembers ended runs for a while: a run id it has seen would make a restarted server's
    run_started change nothing, or refuse every call of a session id that comes back."""

    def __init__(self, service: Service, settings: HookSettings) -> None:
        self.service = service
        self.settings = settings
        self._nonce = secrets.token_hex(4)
        self._runs_made = itertools.count(1)
        self._sessions: dict[str, SessionRun] = {}
        # Per session, not per run: a session's new run reads on where the last one stopped.
        self.transcripts: dict[str, ClaudeTranscript] = {}

    async def handle(self, request: web.Request) -> web.Response:
        agent = AGENTS.get(request.match_info["agent"])
        if agent is None:
            return web.json_response(
                {"error": f"no hooks for {request.match_info['agent']!r}: use one of {sorted(AGENTS)}"},
                status=404,
            )
        try:
            payload = orjson.loads(await request.read())
            answer = await self.answer(agent, payload) if isinstance(payload, dict) else {}
        except Exception as exc:  # the agent's call must not fail because stallwatch did
            # Its type and line only: the message can quote the payload's tool input and output.
            log.warning(
                "stallwatch: a %s hook could not be judged (%s); the call runs", agent.name, fault(exc)
            )
            answer = {}
        return web.json_response(answer)

    async def answer(self, agent: Agent, payload: dict[str, Any]) -> dict[str, Any]:
        event = payload.get("hook_event_name")
        session = payload.get("session_id")
        if not isinstance(session, str) or not session:
            return {}
        if await self.service.sweep():  # sessions killed without SessionEnd are ended after a while
            self._forget_ended_sessions()
        if event in agent.pre_events:
            return await self.before_call(agent, session, payload)
        if event in agent.post_events:
            return await self.after_call(agent, session, payload)
        if event in agent.model_events:
            await self.model_request(agent, session)
        elif event in agent.prompt_events:
            await self.user_prompt(session)
        elif event in agent.end_events:
            await self.session_end(session)
        return {}

    def run_id(self, session: str) -> str:
        """The session's run: a new one when its last has ended (idle, or ended through the API)."""
        current = self._sessions.get(session)
        if current is None or (current.started and current.run_id not in self.service.held):
            current = self._sessions[session] = SessionRun(f"{session}.{self._nonce}.{next(self._runs_made)}")
        return current.run_id

    def _forget_ended_sessions(self) -> None:
        for session in [
            s for s, r in self._sessions.items() if r.started and r.run_id not in self.service.held
        ]:
            del self._sessions[session]
            self.transcripts.pop(session, None)

    async def before_call(self, agent: Agent, session: str, payload: dict[str, Any]) -> dict[str, Any]:
        tool = payload.get("tool_name")
        if not isinstance(tool, str) or not tool:
            return {}
        run_id = self.run_id(session)
        async with self.service.locked(run_id):
            held = self.service.held.get(run_id) or await self._start(agent, session, run_id)
            held.last_used = self.service.clock()
            run, rounds = held.run, held.extra["rounds"]
            if run.stop is not None:
                return agent.deny(str(payload.get("hook_event_name")), run.stop.reason, run.stop.reason)
            key = await self._response_key(agent, session, payload)
            now = self.settings.clock()
            rounds.drop_lapsed(now)
            if rounds.is_new_round(key, now):
                if rounds.open:
                    await run.end_round()
                if key is not None:  # a new model response: the last one's calls are over
                    rounds.calls.clear()
                rounds.open, rounds.key = True, key
                await run.start_round()
            rounds.last_activity = now
            if run.stop is not None:  # the round just ended stopped the run
                return agent.deny(str(payload.get("hook_event_name")), run.stop.reason, run.stop.reason)
            args = agent.call_args(payload)
            judged = agent.judged_tool(tool, args)
            call_id, decision = await run.propose(judged, args, None, agent.call_effect(judged, args))
            if not decision.allowed:
                if run.stop is not None:
                    return agent.deny(str(payload.get("hook_event_name")), run.stop.reason, run.stop.reason)
                return agent.deny(str(payload.get("hook_event_name")), decision.reason, None)
            rounds.allowed(_call_key(payload, tool, args), call_id, now)
            return {}

    async def after_call(self, agent: Agent, session: str, payload: dict[str, Any]) -> dict[str, Any]:
        tool = payload.get("tool_name")
        run_id = self.run_id(session)
        async with self.service.locked(run_id):
            held = self.service.held.get(run_id)
            if held is None or not isinstance(tool, str):
                return {}
            rounds: RoundKeeper = held.extra["rounds"]
            call_id = rounds.finished(_call_key(payload, tool, agent.call_args(payload)))
            if call_id is None:  # a call stallwatch never allowed, lapsed, or from before a restart
                return {}
            rounds.last_activity = self.settings.clock()
            status = "error" if agent.failed(payload) else "ok"
            judged = agent.judged_tool(tool, agent.call_args(payload))
            await held.run.result(call_id, judged, status, agent.result_view(payload))
            return agent.after(str(payload.get("hook_event_name")), held.unread_nudges())

    async def model_request(self, agent: Agent, session: str) -> None:
        """The agent asks the model again: the calls so far form one round, and it ends now."""
        run_id = self.run_id(session)
        async with self.service.locked(run_id):
            held = self.service.held.get(run_id) or await self._start(agent, session, run_id)
            held.last_used = self.service.clock()
            rounds: RoundKeeper = held.extra["rounds"]
            rounds.by_model_requests = True
            rounds.calls.clear()  # the model is asked again: results still missing never come
            if rounds.open:
                rounds.open = False
                await held.run.end_round()

    async def user_prompt(self, session: str) -> None:
        """A new prompt from the user is a new task: a stopped run gives way to a new one."""
        run_id = self.run_id(session)
        async with self.service.locked(run_id):
            held = self.service.held.get(run_id)
            if held is None or held.run.stop is None:
                return
            await self.service.end(run_id, "stopped; the user prompted again")
            self._sessions.pop(session, None)

    async def session_end(self, session: str) -> None:
        run_id = self.run_id(session)
        async with self.service.locked(run_id):
            self._sessions.pop(session, None)
            self.transcripts.pop(session, None)
            if run_id in self.service.held:
                await self.service.end(run_id, "session ended")

    async def _start(self, agent: Agent, session: str, run_id: str) -> Held:
        s = self.settings
        held = await self.service.start(
            run_id, mode=s.mode, tools=[dict(t) for t in agent.tools], policy=s.policy, tenant=s.tenant
        )
        held.extra["rounds"] = RoundKeeper(s.round_gap_s, s.pending_lapse_s)
        current = self._sessions.get(session)
        if current is not None and current.run_id == run_id:
            current.started = True
        return held

    async def _response_key(self, agent: Agent, session: str, payload: dict[str, Any]) -> str | None:
        """Which model response the call is part of, where the agent tells; else None."""
        if not agent.transcript_rounds:
            return None
        tool_use_id, path = payload.get("tool_use_id"), payload.get("transcript_path")
        if not isinstance(tool_use_id, str) or not isinstance(path, str) or not path.endswith(".jsonl"):
            return None
        transcript = self.transcripts.get(session)
        if transcript is None or transcript.path != path:
            transcript = self.transcripts[session] = ClaudeTranscript(path)
        return await transcript.response(tool_use_id, self.settings.transcript_wait_s)


def _call_key(payload: dict[str, Any], tool: str, args: Any) -> str:
    """Pairs a result with its proposal: the agent's call id, else the call itself (Gemini CLI
    gives no id; the same call twice in flight pairs first with first)."""
    tool_use_id = payload.get("tool_use_id")
    if isinstance(tool_use_id, str) and tool_use_id:
        return tool_use_id
    return tool + "\x00" + orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()
