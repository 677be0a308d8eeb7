"""A run as a runtime sees it: send events, await verdicts, receive the stop. Transport-free."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from stallwatch.contract.commands import Command, Nudge, Stop, Verdict
from stallwatch.contract.envelope import envelope
from stallwatch.contract.events import Policy
from stallwatch.engine import words
from stallwatch.engine.canonical import declared_view, fingerprint
from stallwatch.engine.masks import effective_patterns

Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class CallDecision:
    """What the runtime does with a proposed call."""

    allowed: bool
    code: str | None
    reason: str  # text for the model when refused
    timed_out: bool = False  # no verdict in time: allowed, failing open


class Run:
    """One agent run. Make one with a client's `start_run`; use it from one asyncio task."""

    def __init__(self, run_id: str, mode: str, policy: Policy, tools: list[dict[str, Any]], send: Send,
                 verdict_timeout_s: float) -> None:
        self.run_id = run_id
        self.mode = mode
        self.policy = policy
        self.exempt_tools = [t["name"] for t in tools if t.get("repeat_exempt")]
        self._declared = {t["name"]: t for t in tools if t.get("volatile_fields") or t.get("facts")
                          or t.get("volatile_patterns") is not None}
        self.round = 0
        self.stop: Stop | None = None
        self.nudges: list[Nudge] = []  # words for the model before a stop: pass them on
        self.stopped = asyncio.Event()
        self._send = send
        self._timeout = verdict_timeout_s
        self._pending: dict[str, asyncio.Future[Verdict]] = {}
        self._seen_commands: set[str] = set()
        self._calls = 0

    def system_prompt(self) -> str:
        """Text to append to the model's system prompt: which calls will be refused, and why."""
        return words.system_prompt(self.mode, self.policy, self.exempt_tools)

    async def start_round(self) -> int:
        self.round += 1
        await self._event("round_started", round=self.round)
        return self.round

    async def end_round(self) -> None:
        await self._event("round_ended", round=self.round)

    async def propose(self, tool: str, args: Any, call_id: str | None = None,
                      effect: str | None = None) -> tuple[str, CallDecision]:
        """Ask before running a call; returns (call_id, decision). Fails open after the timeout.
        `effect` (coder mode): "read", "write" or "unknown" for this call, overriding its tool's."""
        self._calls += 1
        call_id = call_id or f"call-{self._calls}"
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        optional = {"effect": effect} if effect is not None else {}
        await self._event("call_proposed", round=self.round, call_id=call_id, tool=tool, args=args,
                          **optional)
        try:
            verdict = await asyncio.wait_for(future, self._timeout)
        except TimeoutError:
            return call_id, CallDecision(True, None, f"stallwatch gave no verdict within "
                                         f"{self._timeout:g} s; the call is allowed.", timed_out=True)
        finally:
            self._pending.pop(call_id, None)
        return call_id, CallDecision(verdict.decision == "allow", verdict.code, verdict.reason)

    async def result(self, call_id: str, tool: str, status: str = "ok", result: Any = None,
                     send_content: bool = False) -> None:
        """Report a call's result. By default only its fingerprint leaves the runtime."""
        if send_content:
            await self._event("call_result", round=self.round, call_id=call_id, tool=tool,
                              status=status, result=result)
            return
        fields: dict[str, Any] = {}
        spec = self._declared.get(tool) or {}
        patterns = effective_patterns(self.mode, spec.get("volatile_patterns"))
        if spec or patterns:  # the tool's declarations apply before hashing, as in the engine
            result, items = declared_view(tool, result, spec.get("volatile_fields") or [],
                                          spec.get("facts"), patterns)
            if items is not None:
                fields["fact_fingerprints"] = [d.hex() for d in items]
        digest, empty = fingerprint(result)
        await self._event("call_result", round=self.round, call_id=call_id, tool=tool,
                          status=status, fingerprint=digest, empty=empty, **fields)

    async def end(self, reason: str | None = None) -> None:
        await self._event("run_ended", reason=reason)

    def deliver(self, command: Command) -> None:
        """Called by the client's transport for each command of this run; duplicates are dropped."""
        if command.command_id in self._seen_commands:
            return
        self._seen_commands.add(command.command_id)
        if command.type == "verdict":
            future = self._pending.get(command.call_id)
            if future is not None and not future.done():
                future.set_result(command)
        elif command.type == "nudge":
            self.nudges.append(command)
        elif self.stop is None:
            self.stop = command
            self.stopped.set()

    async def _event(self, kind: str, **fields: Any) -> None:
        await self._send(envelope(kind, self.run_id, **fields))


class Client:
    """What both clients share: starting runs and routing each command to its run."""

    verdict_timeout_s: float

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}

    async def start_run(self, run_id: str, mode: str = "researcher",
                        tools: list[dict[str, Any]] | None = None, policy: dict[str, Any] | None = None,
                        parent_run_id: str | None = None, tenant: str | None = None) -> Run:
        """Publish run_started and return the run's handle. `tools` as in the contract."""
        tools = tools or []
        run = Run(run_id, mode, Policy.for_mode(mode, policy), tools, self._send,
                  self.verdict_timeout_s)
        self.runs[run_id] = run
        await self._prepare(run_id)
        optional = {"policy": policy, "parent_run_id": parent_run_id, "tenant": tenant}
        await self._send(envelope("run_started", run_id, mode=mode, tools=tools,
                                  **{k: v for k, v in optional.items() if v is not None}))
        return run

    def forget(self, run_id: str) -> None:
        """Stop routing commands to a finished run."""
        self.runs.pop(run_id, None)

    async def _prepare(self, run_id: str) -> None:
        """Get ready to receive the run's commands before its first event goes out."""

    async def _send(self, event: dict[str, Any]) -> None:
        raise NotImplementedError
