"""What every framework adapter does with a run: rounds, proposals, results, nudges and the stop."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic_core import to_jsonable_python

from stallwatch.client.run import CallDecision, Client, Run
from stallwatch.client.sync import SyncClient
from stallwatch.contract.commands import Stop
from stallwatch.contract.faults import fault

T = TypeVar("T")
log = logging.getLogger(__name__)
# What a call gets when stallwatch itself fails while judging it: it runs, as with no guard.
_UNGUARDED = CallDecision(True, None, "stallwatch failed while judging this call; it runs unguarded.")
_UNGUARDED_CALL = "unguarded-"  # the call id such a call gets

_JSON_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_JSON_SCALARS)  # exact types: an enum or str subclass is converted


@dataclass(frozen=True)
class RunSpec:
    """How an adapter starts its runs: the mode, the tools' declarations, the policy.

    `tools` are contract tool entries (`{"name": ..., "repeat_exempt": True}`, `volatile_fields`,
    `facts`) for the tools that declare something; every other tool is listed by name only.
    """

    mode: str = "researcher"
    tools: tuple[dict[str, Any], ...] = ()
    policy: dict[str, Any] | None = None
    run_id_prefix: str = "run"
    tell_rules: bool = True  # append the run's rules to the model's instructions

    def tool_entries(self, names: Iterable[str]) -> list[dict[str, Any]]:
        declared = {t["name"]: t for t in self.tools}
        return [*self.tools, *({"name": n} for n in dict.fromkeys(names) if n not in declared)]

    def new_run_id(self) -> str:
        return f"{self.run_id_prefix}-{uuid.uuid4().hex[:16]}"


class Bridge:
    """How a framework's hooks reach the client: on its own loop, or through a SyncClient's."""

    def __init__(self, client: Client | SyncClient) -> None:
        self.client = client
        self.sync = client if isinstance(client, SyncClient) else None

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """From an async hook: the SyncClient's loop is another loop, so wait on its future
        (an inline SyncClient's call never waits: it runs here, under the client's lock)."""
        if self.sync is None:
            return await coro
        if self.sync.inline:
            return self.sync.do(coro)
        return await asyncio.wrap_future(self.sync.submit(coro))

    def run_blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """From a sync hook (a framework invoked without asyncio): needs a SyncClient."""
        if self.sync is None:
            coro.close()
            raise TypeError(
                "a synchronous agent call needs stallwatch.client.SyncClient; "
                "an asyncio client serves only the framework's async calls"
            )
        return self.sync.do(coro)

    @property
    def async_client(self) -> Client:
        client = self.client
        return client.client if isinstance(client, SyncClient) else client


@dataclass
class ModelTurn:
    """What the next model call may do, and the words it gets from stallwatch."""

    stop: Stop | None
    notes: list[str] = field(default_factory=list)  # nudges, then the stop's reason

    @property
    def tools_allowed(self) -> bool:
        return self.stop is None

    @property
    def end_turn(self) -> bool:
        """The stop ends the turn: the model is not called again."""
        return self.ending_stop is not None

    @property
    def ending_stop(self) -> Stop | None:
        """The stop when it ends the turn (its reason is the agent's last words); else None."""
        stop = self.stop
        return stop if stop is not None and stop.action == "end_turn" else None


class Guard:
    """One agent run seen through a framework's hooks. Its coroutines run on the client's loop.

    A round is one model call plus the tool calls in its response: it opens when the model is
    called and closes when the next model call begins (or an adapter knows every call is done),
    or when the run finishes.
    """

    def __init__(self, client: Client, spec: RunSpec, run_id: str | None = None) -> None:
        self.client = client
        self.spec = spec
        self.run_id = run_id or spec.new_run_id()
        self.run: Run | None = None
        self._round_open = False
        self._nudges_shown = 0
        self._finished = False
        self._rules = ""
        self.kept: dict[str, Any] = {}  # what an adapter reuses from one call of this run to the next

    @property
    def stop(self) -> Stop | None:
        return self.run.stop if self.run is not None else None

    def rules(self) -> str:
        """The run's rules for the model's instructions ("" before the run starts or when off)."""
        return self._rules

    async def start(self, tool_names: Iterable[str] = ()) -> None:
        """Publish run_started once; later calls do nothing. A failure leaves the run unstarted
        (logged): the next call tries again."""
        if self.run is None:
            try:
                run = await self.client.start_run(
                    self.run_id, self.spec.mode, self.spec.tool_entries(tool_names), self.spec.policy
                )
            except Exception as exc:
                _unguarded("starting the run", exc)
                return
            self.run = run
            self._rules = run.system_prompt() if self.spec.tell_rules else ""

    async def begin_model_call(self, tool_names: Iterable[str] = ()) -> ModelTurn:
        """Before a model call: close the open round, then open this call's round unless stopped."""
        await self.start(tool_names)
        await self.end_round()
        run = self.run
        if run is None:
            return ModelTurn(None, [])
        notes = [n.reason for n in run.nudges[self._nudges_shown :]]
        self._nudges_shown = len(run.nudges)
        if run.stop is not None:
            return ModelTurn(run.stop, [*notes, run.stop.reason])
        try:
            await run.start_round()
        except Exception as exc:
            _unguarded("starting a round", exc)
            return ModelTurn(None, notes)
        self._round_open = True
        return ModelTurn(None, notes)

    async def end_round(self) -> None:
        if self._round_open and self.run is not None:
            self._round_open = False
            try:
                await self.run.end_round()
            except Exception as exc:
                _unguarded("ending a round", exc)

    async def propose(self, tool: str, args: Any) -> tuple[str, CallDecision]:
        """Ask before a call runs; returns (call_id, decision). Call ids are stallwatch's own,
        since scripted and some real models reuse theirs. Any fault of stallwatch's lets this one
        call run, with a log line; the next call is judged again."""
        await self.start([tool])
        if self.run is not None:
            try:
                return await self.run.propose(tool, _jsonable(args))
            except Exception as exc:
                _unguarded("judging a call", exc)
        return f"{_UNGUARDED_CALL}{uuid.uuid4().hex[:8]}", _UNGUARDED

    async def report(self, call_id: str, tool: str, ok: bool, result: Any) -> None:
        """A call's result; only its fingerprint leaves the runtime (none for a call that ran
        unguarded: stallwatch never heard of it)."""
        if self.run is None or call_id.startswith(_UNGUARDED_CALL):
            return
        status = "ok" if ok else "error"
        try:
            try:
                await self.run.result(call_id, tool, status, _jsonable(result))
            except ValueError:  # no canonical JSON: report no content, which counts as new
                await self.run.result(call_id, tool, status, None)
        except Exception as exc:
            _unguarded("reporting a result", exc)

    async def finish(self, reason: str | None = None) -> None:
        """Close the open round and end the run; forget it so memory stays bounded. Idempotent."""
        if self._finished or self.run is None:
            return
        self._finished = True
        await self.end_round()
        try:
            await self.run.end(reason)
        except Exception as exc:
            _unguarded("ending the run", exc)
        self.client.forget(self.run_id)


def _unguarded(what: str, exc: Exception) -> None:
    log.warning("stallwatch failed %s (%s); the agent goes on unguarded there", what, fault(exc))


def _jsonable(value: Any) -> Any:
    """Framework objects (pydantic models, dataclasses, messages) as JSON values for hashing."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if type(value) is dict and all(type(k) is str and type(v) in _SCALAR_TYPES for k, v in value.items()):
        return value  # most tools' arguments: already JSON, read at once, never kept
    return to_jsonable_python(value, fallback=repr)  # repr: an unknown object still hashes (as new)


def refusal_text(decision: CallDecision) -> str:
    """What the model sees in place of a refused call's result."""
    return f"stallwatch: {decision.reason}"


def instructions_text(base: str | None, rules: str, notes: list[str]) -> str | None:
    """The model's instructions with the run's rules and this call's words appended."""
    extra = [rules] if rules else []
    extra += [f"stallwatch: {note}" for note in notes]
    if not extra:
        return base
    return "\n\n".join([base, *extra] if base else extra)
