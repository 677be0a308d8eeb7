"""A run as a runtime sees it: send events, await verdicts, receive the stop. Transport-free."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self, get_args

from stallwatch.contract.commands import Command, Nudge, Stop, Verdict, WouldStop
from stallwatch.contract.envelope import envelope
from stallwatch.contract.events import Effect, Status
from stallwatch.contract.limits import bounded_id
from stallwatch.contract.policy import Policy
from stallwatch.engine import words
from stallwatch.engine.canonical import call_signature, declared_view, fingerprint
from stallwatch.engine.masks import effective_patterns

Send = Callable[[dict[str, Any]], Awaitable[bool | None]]  # False: not sent, the broker is away
# An in-process transport: applies an event at once and returns the commands it caused.
Apply = Callable[[dict[str, Any]], list[Command]]
_STATUSES = frozenset(get_args(Status))
_EFFECTS = frozenset(get_args(Effect))


@dataclass(frozen=True)
class CallDecision:
    """What the runtime does with a proposed call."""

    allowed: bool
    code: str | None
    reason: str  # text for the model when refused
    timed_out: bool = False  # no verdict in time: allowed, failing open
    # Observe-only: the refusal this call would have had (it is allowed all the same).
    would_code: str | None = None
    would_reason: str | None = None


_ALLOWED = CallDecision(True, None, words.ALLOWED)  # most calls: made once, not once per call
_UNREACHABLE = CallDecision(True, None, "stallwatch cannot be reached; the call is allowed.", timed_out=True)


def _decision(verdict: Verdict) -> CallDecision:
    if verdict.would_code is not None:
        return CallDecision(
            True, None, verdict.reason, would_code=verdict.would_code, would_reason=verdict.would_reason
        )
    if verdict.decision == "allow" and verdict.code is None and verdict.reason == words.ALLOWED:
        return _ALLOWED
    return CallDecision(verdict.decision == "allow", verdict.code, verdict.reason)


@dataclass
class VerdictHealth:
    """Whether verdicts come: the client's calls answered and timed out, and when each last
    happened (monotonic), for a health check to tell a judged fleet from one failing open."""

    answered: int = 0
    timed_out: int = 0
    last_answered_at: float | None = None
    last_timed_out_at: float | None = None

    def record(self, timed_out: bool) -> None:
        now = time.monotonic()
        if timed_out:
            self.timed_out += 1
            self.last_timed_out_at = now
        else:
            self.answered += 1
            self.last_answered_at = now

    @property
    def coming(self) -> bool | None:
        """True when the last call asked was answered, False when it timed out (the client fails
        open), None before any call."""
        if self.last_timed_out_at is None:
            return None if self.last_answered_at is None else True
        return self.last_answered_at is not None and self.last_answered_at > self.last_timed_out_at


class Run:
    """One agent run. Make one with a client's `start_run`. Calls may be proposed from several
    tasks at once (each awaits its own verdict); rounds are started and ended from one place."""

    def __init__(
        self,
        run_id: str,
        mode: str,
        policy: Policy,
        tools: list[dict[str, Any]],
        send: Send,
        verdict_timeout_s: float,
        apply: Apply | None = None,
        secret: bytes | None = None,
        args_digest_only: bool = False,
        verdicts: VerdictHealth | None = None,
    ) -> None:
        """`secret` keys the digests this run sends (shared with the workers); with
        `args_digest_only`, a call's arguments leave the runtime only as a digest. `verdicts`:
        where the client counts its verdicts and timeouts (None: not counted)."""
        self._verdicts = verdicts
        self.run_id = run_id
        self.mode = mode
        self.policy = policy
        self.exempt_tools = [t["name"] for t in tools if t.get("repeat_exempt")]
        self._declared = {
            t["name"]: t
            for t in tools
            if t.get("volatile_fields") or t.get("facts") or t.get("volatile_patterns") is not None
        }
        self._default_patterns = effective_patterns(mode, None)  # for tools that declare none
        self.round = 0
        self.stop: Stop | None = None
        self.nudges: list[Nudge] = []  # words for the model before a stop: pass them on
        # Observe-only: the stop the run would have had, for operators; never acted on.
        self.would_stop: WouldStop | None = None
        self.stopped = asyncio.Event()
        self._send = send
        # In-process, events are applied without awaiting a transport: each await of a
        # coroutine and each future is a sizeable share of the ~10 µs a call may cost there.
        self._apply = apply
        self._timeout = verdict_timeout_s
        self._secret = secret
        self._args_digest_only = args_digest_only
        self._pending: dict[str, asyncio.Future[Verdict]] = {}
        self._seen_commands: set[str] = set()
        self._calls = 0
        # Event ids: one random prefix per handle and a counter, not a uuid4 per event (a third
        # of the in-process cost of a call). The prefix keeps a run id reused by a restarted
        # runtime from having its new events dropped as redeliveries of the old ones.
        self._id_prefix = uuid.uuid4().hex[:16] + "-"
        self._event_numbers = itertools.count(1)
        # This run's envelope as the contract builds it (`envelope`); each event copies it and
        # stamps its type, id and time: a call per event would add ~2 µs to every guarded call.
        self._envelope = envelope("", run_id, "", 0.0)

    def system_prompt(self) -> str:
        """Text to append to the model's system prompt: which calls will be refused, and why.
        Nothing for an observe-only run: the model is told nothing, as it is refused nothing."""
        if self.policy.observe_only:
            return ""
        return words.system_prompt(self.mode, self.policy, self.exempt_tools)

    async def start_round(self) -> int:
        self.round += 1
        event = self._envelope | {
            "type": "round_started",
            "event_id": self.next_event_id(),
            "ts": time.time(),
            "round": self.round,
        }
        if self._apply is None:
            await self._send(event)
        else:
            self._take(self._apply(event))
        return self.round

    async def end_round(self) -> None:
        event = self._envelope | {
            "type": "round_ended",
            "event_id": self.next_event_id(),
            "ts": time.time(),
            "round": self.round,
        }
        if self._apply is None:
            await self._send(event)
        else:
            self._take(self._apply(event))

    async def propose(
        self, tool: str, args: Any, call_id: str | None = None, effect: str | None = None
    ) -> tuple[str, CallDecision]:
        """Ask before running a call; returns (call_id, decision). Fails open after the timeout.
        `effect` (coder mode): "read", "write" or "unknown" for this call, overriding its tool's."""
        self._calls += 1
        call_id = call_id or f"call-{self._calls}"
        if type(tool) is not str or type(call_id) is not str:
            raise TypeError(f"tool and call_id must be strings, not {tool!r} and {call_id!r}")
        if effect is not None and effect not in _EFFECTS:  # in-process events skip validation
            raise ValueError(f"effect must be one of {sorted(_EFFECTS)}, not {effect!r}")
        # Ids too long for a verdict travel as the marked digest the detector would make of them.
        event = self._envelope | {
            "type": "call_proposed",
            "event_id": self.next_event_id(),
            "ts": time.time(),
            "round": self.round,
            "call_id": bounded_id(call_id, self._secret),
            "tool": bounded_id(tool, self._secret),
            "args": args,
        }
        if effect is not None:
            event["effect"] = effect
        if self._args_digest_only:
            signature = call_signature(tool, event.pop("args"), self._secret)
            # Arguments without a canonical form are never a repeat: a digest of nothing else.
            event["args_digest"] = signature.hex() if signature else f"unhashable:{uuid.uuid4().hex}"
        verdict: Verdict | None = None
        if self._apply is not None:
            for command in self._apply(event):
                if command.type == "verdict" and command.call_id == event["call_id"]:
                    verdict = command
                else:
                    self.deliver(command)
        else:
            awaited = await self._await_verdict(event)
            if self._verdicts is not None:
                self._verdicts.record(timed_out=not isinstance(awaited, Verdict))
            if isinstance(awaited, CallDecision):  # _UNREACHABLE, its only decision
                return call_id, awaited
            verdict = awaited
        if verdict is None:
            return call_id, CallDecision(
                True,
                None,
                f"stallwatch gave no verdict within {self._timeout:g} s; the call is allowed.",
                timed_out=True,
            )
        return call_id, _decision(verdict)

    async def _await_verdict(self, event: dict[str, Any]) -> Verdict | CallDecision | None:
        """Send a call_proposed and wait for its verdict: None after the timeout (sending and
        waiting together), _UNREACHABLE at once when the transport could not send it."""
        call_id = event["call_id"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        future: asyncio.Future[Verdict] = loop.create_future()
        self._pending[call_id] = future
        try:
            if await self._send(event) is False:
                return _UNREACHABLE
            if future.done():
                return future.result()
            return await asyncio.wait_for(future, max(deadline - loop.time(), 0.0))
        except TimeoutError:
            return None
        finally:
            self._pending.pop(call_id, None)

    async def result(
        self, call_id: str, tool: str, status: str = "ok", result: Any = None, send_content: bool = False
    ) -> None:
        """Report a call's result. By default only its fingerprint leaves the runtime."""
        if type(tool) is not str or type(call_id) is not str or status not in _STATUSES:
            raise ValueError(
                f"a result needs string tool and call_id and a status among "
                f"{sorted(_STATUSES)}; got {tool!r}, {call_id!r}, {status!r}"
            )
        event = self._envelope | {
            "type": "call_result",
            "event_id": self.next_event_id(),
            "ts": time.time(),
            "round": self.round,
            "call_id": bounded_id(call_id, self._secret),
            "tool": bounded_id(tool, self._secret),
            "status": status,
        }
        if send_content:
            event["result"] = result
        else:
            spec = self._declared.get(tool)
            patterns = (
                self._default_patterns
                if spec is None
                else effective_patterns(self.mode, spec.get("volatile_patterns"))
            )
            if spec is not None or patterns:  # declarations apply before hashing, as in the engine
                spec = spec or {}
                result, items = declared_view(
                    tool, result, spec.get("volatile_fields") or [], spec.get("facts"), patterns, self._secret
                )
                if items is not None:
                    event["fact_fingerprints"] = [d.hex() for d in items]
            event["fingerprint"], event["empty"] = fingerprint(result, self._secret)
        if self._apply is None:
            await self._send(event)
        else:
            self._take(self._apply(event))

    async def end(self, reason: str | None = None) -> None:
        if reason is not None and type(reason) is not str:
            raise TypeError(f"reason must be a string, not {reason!r}")
        event = envelope("run_ended", self.run_id, self.next_event_id(), reason=reason)
        if self._apply is None:
            await self._send(event)
        else:
            self._take(self._apply(event))

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
        elif command.type == "stop":
            if self.stop is None:
                self.stop = command
                self.stopped.set()
        elif command.type == "would_stop" and self.would_stop is None:
            self.would_stop = command
        # A would_nudge is for operators only: never shown to the model.

    def _take(self, commands: list[Command]) -> None:
        for command in commands:
            self.deliver(command)

    def next_event_id(self) -> str:
        return f"{self._id_prefix}{next(self._event_numbers)}"


class Client:
    """What both clients share: starting runs and routing each command to its run."""

    verdict_timeout_s: float
    _apply: Apply | None = None  # set by in-process clients
    fingerprint_secret: bytes | None = None  # keys the digests the runs send
    args_digest_only: bool = False  # runs send `args_digest` in place of `args`
    # True for an in-process client whose coroutines never wait (no I/O): a SyncClient then runs
    # them on the caller's thread under a lock instead of crossing to its loop thread and back.
    runs_inline: bool = False

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}
        self.verdicts = VerdictHealth()

    def health(self) -> dict[str, Any]:
        """What a health check says of the verdicts (a transport's client adds its own)."""
        return {"verdicts": "in process"}

    async def __aenter__(self) -> Self:
        """Start the client (each client says how): `async with client:` serves any client."""
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        raise NotImplementedError

    async def start_run(
        self,
        run_id: str,
        mode: str = "researcher",
        tools: list[dict[str, Any]] | None = None,
        policy: dict[str, Any] | None = None,
        parent_run_id: str | None = None,
        tenant: str | None = None,
    ) -> Run:
        """Publish run_started and return the run's handle. `tools` as in the contract."""
        tools = tools or []
        effective = Policy.for_mode(mode, policy)
        if self.observes(tenant) and not effective.observe_only:  # the administrator's switch
            effective = effective.model_copy(update={"observe_only": True})
        run = Run(
            run_id,
            mode,
            effective,
            tools,
            self._send,
            self.verdict_timeout_s,
            self._apply,
            self.fingerprint_secret,
            self.args_digest_only,
            self.verdicts,
        )
        self.runs[run_id] = run
        await self._prepare(run_id)
        optional: dict[str, Any] = {"policy": policy, "parent_run_id": parent_run_id, "tenant": tenant}
        await self._send(
            envelope(
                "run_started",
                run_id,
                run.next_event_id(),
                mode=mode,
                tools=tools,
                **{k: v for k, v in optional.items() if v is not None},
            )
        )
        return run

    def observes(self, tenant: str | None) -> bool:
        """Whether the administrator made runs of `tenant` observe-only, as far as this client
        knows (its engine's policy in process; the same settings as the workers' on Kafka)."""
        return False

    async def submit(self, event: dict[str, Any]) -> list[Command]:
        """An event built outside a run's handle (the OTLP receiver's, validated already):
        applied in process, its commands returned; or published to the events topic, where the
        workers answer on the commands topic (none returned here)."""
        if self._apply is not None:
            return self._apply(event)
        await self._send(event)
        return []

    def forget(self, run_id: str) -> None:
        """Stop routing commands to a finished run."""
        self.runs.pop(run_id, None)

    async def _prepare(self, run_id: str) -> None:
        """Get ready to receive the run's commands before its first event goes out."""

    async def _send(self, event: dict[str, Any]) -> bool | None:
        """Deliver one event; False when it could not be sent (failing open)."""
        raise NotImplementedError
