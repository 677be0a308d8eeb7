"""PydanticAI: stallwatch as a capability (per-step tool preparation, a tool-execution wrapper)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

try:
    import pydantic_ai  # noqa: F401  (a missing framework is named with the extra that brings it)
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(f"stallwatch.adapters.pydantic_ai needs the [pydantic-ai] extra (no module "
                              f"{exc.name!r}): pip install 'stallwatch[pydantic-ai]'",
                              name=exc.name) from exc
from pydantic_ai import ModelRequestNode
from pydantic_ai.capabilities import (
    AbstractCapability,
    AgentNode,
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext, ToolDefinition

from stallwatch.adapters.core import Bridge, Guard, ModelTurn, RunSpec, instructions_text, refusal_text
from stallwatch.client.run import Client
from stallwatch.client.sync import SyncClient


class Stallwatch(AbstractCapability[Any]):
    """One stallwatch run per agent run: `Agent(model, capabilities=[Stallwatch(client)])`.

    A round is one model request and the tool calls in its response. Each call is proposed before
    it runs; a refusal is returned to the model as the tool's result, in stallwatch's words. The
    rules, nudges and the stop's words go into the instructions; after a stop the step's tools
    are removed (`answer_without_tools`) or the model is not called and the stop's words are
    the answer (`end_turn`).
    """

    def __init__(self, client: Client | SyncClient, *, mode: str = "researcher",
                 tools: Iterable[dict[str, Any]] = (), policy: dict[str, Any] | None = None,
                 run_id_prefix: str = "pydantic-ai", tell_rules: bool = True) -> None:
        self.bridge = Bridge(client)
        self.spec = RunSpec(mode, tuple(tools), policy, run_id_prefix, tell_rules)
        self.guard: Guard | None = None  # set on the per-run copy only
        self._turn = ModelTurn(None)

    async def for_run(self, ctx: RunContext[Any]) -> Stallwatch:
        """A fresh copy per run: rounds and the stop belong to one run."""
        run = Stallwatch.__new__(Stallwatch)
        run.bridge, run.spec, run._turn = self.bridge, self.spec, ModelTurn(None)
        run.guard = Guard(self.bridge.async_client, self.spec)
        return run

    def get_instructions(self) -> Any:
        def instructions(ctx: RunContext[Any]) -> str:
            if self.guard is None:
                return ""
            return instructions_text(None, self.guard.rules(), self._turn.notes) or ""
        return instructions

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        try:
            return await handler()
        finally:
            if self.guard is not None:
                await self.bridge.run(self.guard.finish("answered"))

    async def before_node_run(self, ctx: RunContext[Any], *, node: AgentNode[Any]) -> AgentNode[Any]:
        # Before the step prepares its tools, so the last round's stop is known by then; this
        # hook (unlike wrap_node_run) also fires for the last model request of run_stream().
        if self.guard is not None and isinstance(node, ModelRequestNode):
            self._turn = await self.bridge.run(self.guard.begin_model_call())
        return node

    async def prepare_tools(self, ctx: RunContext[Any],
                            tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        return tool_defs if self._turn.tools_allowed else []

    async def wrap_model_request(self, ctx: RunContext[Any], *, request_context: ModelRequestContext,
                                 handler: WrapModelRequestHandler) -> ModelResponse:
        if self._turn.end_turn:
            return ModelResponse(parts=[TextPart(self._turn.stop.reason)])  # type: ignore[union-attr]
        return await handler(request_context)

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition,
                                args: ValidatedToolArgs, handler: WrapToolExecuteHandler) -> Any:
        if self.guard is None:
            return await handler(args)
        call_id, decision = await self.bridge.run(self.guard.propose(call.tool_name, args))
        if not decision.allowed:
            return refusal_text(decision)
        try:
            result = await handler(args)
        except (CallDeferred, ApprovalRequired):
            raise  # not run yet: no result to report (a result never seen counts as new)
        except Exception:
            await self.bridge.run(self.guard.report(call_id, call.tool_name, False, None))
            raise
        await self.bridge.run(self.guard.report(call_id, call.tool_name, True, result))
        return result
