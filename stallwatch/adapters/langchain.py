"""LangChain v1 agents (`create_agent`): stallwatch as an `AgentMiddleware`."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Annotated, Any, Final, NotRequired

try:
    import langchain  # noqa: F401  (a missing framework is named with the extra that brings it)
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"stallwatch.adapters.langchain needs the [langchain] extra (no module "
        f"{exc.name!r}): pip install 'stallwatch[langchain]'",
        name=exc.name,
    ) from exc
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from stallwatch.adapters.core import Bridge, Guard, ModelTurn, RunSpec, instructions_text, refusal_text
from stallwatch.client.run import Client
from stallwatch.client.sync import SyncClient

RUN_KEY: Final = "stallwatch_run_id"


class StallwatchState(AgentState):
    """The agent's state plus the id of the stallwatch run of this invocation (private) and, in
    the result, the stop that ended it: `out["stallwatch_stop"]` is the Stop command as JSON
    (`code`, `action`, `reason`, `detail`), or None when the agent answered unstopped."""

    stallwatch_run_id: NotRequired[Annotated[str | None, PrivateStateAttr]]
    stallwatch_stop: NotRequired[dict[str, Any] | None]


class StallwatchMiddleware(AgentMiddleware[StallwatchState]):
    """One stallwatch run per agent invocation; a round per model call; each tool call proposed
    before it runs. A refusal becomes the tool's message; a nudge goes into the next model
    call's system message; after a stop the model is called without tools (`answer_without_tools`)
    or not at all (`end_turn`: the stop's words are the agent's last message).

    `client`: an asyncio client serves `ainvoke`/`astream`; a SyncClient serves both those and
    `invoke`/`stream`. The result's `stallwatch_stop` says whether and why the run was stopped. A
    tool or model call that raises (LangChain's default for a tool error) ends the run before
    the exception goes on, so a crashed invocation holds nothing.
    """

    state_schema = StallwatchState

    def __init__(
        self,
        client: Client | SyncClient,
        *,
        mode: str = "researcher",
        tools: Iterable[dict[str, Any]] = (),
        policy: dict[str, Any] | None = None,
        run_id_prefix: str = "langchain",
        tell_rules: bool = True,
    ) -> None:
        super().__init__()
        self.bridge = Bridge(client)
        self.spec = RunSpec(mode, tuple(tools), policy, run_id_prefix, tell_rules)
        self.guards: dict[str, Guard] = {}  # live runs by id; the id travels in the agent's state

    # -- the run: one per invocation ------------------------------------------------------------

    def _begin(self) -> dict[str, Any]:
        guard = Guard(self.bridge.async_client, self.spec)
        self.guards[guard.run_id] = guard
        return {RUN_KEY: guard.run_id}

    def before_agent(self, state: StallwatchState, runtime: Any) -> dict[str, Any]:
        return self._begin()

    async def abefore_agent(self, state: StallwatchState, runtime: Any) -> dict[str, Any]:
        return self._begin()

    def after_agent(self, state: StallwatchState, runtime: Any) -> dict[str, Any] | None:
        guard = self.guards.pop(_run_id(state), None)
        if guard is None:
            return None
        self.bridge.run_blocking(guard.finish("answered"))
        return _stopped(guard)

    async def aafter_agent(self, state: StallwatchState, runtime: Any) -> dict[str, Any] | None:
        guard = self.guards.pop(_run_id(state), None)
        if guard is None:
            return None
        await self.bridge.run(guard.finish("answered"))
        return _stopped(guard)

    def _crashed(self, guard: Guard) -> None:
        """The invocation raises past the middleware: LangChain calls no after_agent, so the
        run ends here."""
        self.guards.pop(guard.run_id, None)
        self.bridge.run_blocking(guard.finish("raised"))

    async def _acrashed(self, guard: Guard) -> None:
        self.guards.pop(guard.run_id, None)
        await self.bridge.run(guard.finish("raised"))

    # -- rounds: one per model call ---------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse | AIMessage:
        guard = self.guards.get(_run_id(request.state))
        if guard is None:
            return handler(request)
        turn = self.bridge.run_blocking(guard.begin_model_call(_tool_names(request, guard)))
        if (ending := turn.ending_stop) is not None:
            return AIMessage(content=ending.reason)
        try:
            return handler(_shaped(request, guard, turn))
        except Exception:
            self._crashed(guard)
            raise

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse | AIMessage:
        guard = self.guards.get(_run_id(request.state))
        if guard is None:
            return await handler(request)
        turn = await self.bridge.run(guard.begin_model_call(_tool_names(request, guard)))
        if (ending := turn.ending_stop) is not None:
            return AIMessage(content=ending.reason)
        try:
            return await handler(_shaped(request, guard, turn))
        except Exception:
            await self._acrashed(guard)
            raise

    # -- tool calls: proposed before they run -----------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command]
    ) -> ToolMessage | Command:
        guard = self.guards.get(_run_id(request.state))
        if guard is None:
            return handler(request)
        call = request.tool_call
        call_id, decision = self.bridge.run_blocking(guard.propose(call["name"], call["args"]))
        if not decision.allowed:
            return _refused(request, refusal_text(decision))
        try:
            out = handler(request)
        except Exception:
            self.bridge.run_blocking(guard.report(call_id, call["name"], False, None))
            self._crashed(guard)
            raise
        self.bridge.run_blocking(guard.report(call_id, call["name"], *_outcome(out)))
        return out

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        guard = self.guards.get(_run_id(request.state))
        if guard is None:
            return await handler(request)
        call = request.tool_call
        call_id, decision = await self.bridge.run(guard.propose(call["name"], call["args"]))
        if not decision.allowed:
            return _refused(request, refusal_text(decision))
        try:
            out = await handler(request)
        except Exception:
            await self.bridge.run(guard.report(call_id, call["name"], False, None))
            await self._acrashed(guard)
            raise
        await self.bridge.run(guard.report(call_id, call["name"], *_outcome(out)))
        return out


def _run_id(state: Mapping[str, object]) -> str:
    """The id of the stallwatch run the agent's state carries; "" for a run begun elsewhere.
    LangChain types a request's state as its base `AgentState`, which lacks this key."""
    run_id = state.get(RUN_KEY)
    return run_id if isinstance(run_id, str) else ""


def _stopped(guard: Guard) -> dict[str, Any]:
    """The result's `stallwatch_stop`: the stop as JSON, or None."""
    stop = guard.stop
    return {"stallwatch_stop": dataclasses.asdict(stop) if stop is not None else None}


def _tool_names(request: ModelRequest, guard: Guard) -> list[str]:
    """The tools the run starts with (read once: later model calls would only rebuild them)."""
    if guard.run is not None:
        return []
    return [str(t.get("name", "")) if isinstance(t, dict) else t.name for t in request.tools]


def _shaped(request: ModelRequest, guard: Guard, turn: ModelTurn) -> ModelRequest:
    """The request with the rules and this call's words in the system message; no tools after
    a stop, so the model answers from what it gathered."""
    extra = instructions_text(None, guard.rules(), turn.notes)
    changes: dict[str, Any] = {}
    if extra:
        changes["system_message"] = _appended_once(guard, request.system_message, extra)
    if not turn.tools_allowed:
        changes.update(tools=[], tool_choice=None)
    return request.override(**changes) if changes else request


def _appended_once(guard: Guard, system: SystemMessage | None, extra: str) -> SystemMessage:
    """`_appended`, reused while the agent's system message and stallwatch's text are the same
    (most model calls: the rules only): a message built per model call cost a tenth of the
    adapter's own time per call."""
    last = guard.kept.get("system_message")
    if last is not None and last[0] is system and last[1] == extra:
        return last[2]
    message = _appended(system, extra)
    guard.kept["system_message"] = (system, extra, message)
    return message


def _appended(system: SystemMessage | None, extra: str) -> SystemMessage:
    """The system message with stallwatch's text after it; content blocks (cache markers) kept."""
    if system is None or not system.content:
        return SystemMessage(content=extra)
    if isinstance(system.content, str):
        return SystemMessage(content=f"{system.content}\n\n{extra}")
    return SystemMessage(content=[*system.content, {"type": "text", "text": extra}])


def _refused(request: ToolCallRequest, text: str) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(content=text, tool_call_id=call["id"], name=call["name"], status="error")


def _outcome(out: ToolMessage | Command) -> tuple[bool, Any]:
    """(ok, content) of a tool's answer; a Command (a state update) reports no content."""
    if isinstance(out, ToolMessage):
        return out.status != "error", out.content
    return True, None
