"""PydanticAI: stallwatch as a capability (per-step tool preparation, a tool-execution wrapper)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

try:
    import pydantic_ai  # noqa: F401  (a missing framework is named with the extra that brings it)
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"stallwatch.adapters.pydantic_ai needs the [pydantic-ai] extra (no module "
        f"{exc.name!r}): pip install 'stallwatch[pydantic-ai]'",
        name=exc.name,
    ) from exc
from pydantic_ai import ModelRequestNode
from pydantic_ai.capabilities import (
    AbstractCapability,
    AgentNode,
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext, ToolDefinition

from stallwatch.adapters.core import Bridge, Guard, ModelTurn, RunSpec, instructions_text, refusal_text
from stallwatch.client.run import Client
from stallwatch.client.sync import SyncClient
from stallwatch.contract.policy import V1_DEFAULTS

log = logging.getLogger(__name__)


class Stallwatch(AbstractCapability[Any]):
    """One stallwatch run per agent run: `Agent(model, capabilities=[Stallwatch(client)])`.

    A round is one model request and the tool calls in its response. Each call is proposed before
    it runs; a refusal is returned to the model as the tool's result, in stallwatch's words. The
    rules, nudges and the stop's words go into the instructions; after a stop the step's tools
    are removed (`answer_without_tools`) or the model is not called and the stop's words are
    the answer (`end_turn`). After a stop, `result.metadata["stallwatch_stop"]` is the Stop as
    JSON (`code`, `action`, `reason`, `detail`).

    Failures: a tool's `ToolFailed` and `ModelRetry` count as failures; so does a plain exception,
    which PydanticAI lets end the run (the stallwatch run is ended with it). `ModelRetry` spends
    the tool's retries (1 by default): PydanticAI ends the run at failure retries+1, so
    stallwatch's stop after 5 failures in a row needs `retries=5` or more (said once per tool in
    the log when it is fewer).
    """

    def __init__(
        self,
        client: Client | SyncClient,
        *,
        mode: str = "researcher",
        tools: Iterable[dict[str, Any]] = (),
        policy: dict[str, Any] | None = None,
        run_id_prefix: str = "pydantic-ai",
        tell_rules: bool = True,
    ) -> None:
        self.bridge = Bridge(client)
        self.spec = RunSpec(mode, tuple(tools), policy, run_id_prefix, tell_rules)
        self.guard: Guard | None = None  # set on the per-run copy only
        self._turn = ModelTurn(None)
        self._warned: set[str] = set()  # tools already named for too few retries

    async def for_run(self, ctx: RunContext[Any]) -> Stallwatch:
        """A fresh copy per run: rounds and the stop belong to one run."""
        run = Stallwatch.__new__(Stallwatch)
        # Its own class's attributes, on the copy it makes of itself.
        run.bridge, run.spec, run._turn = self.bridge, self.spec, ModelTurn(None)  # noqa: SLF001
        run.guard = Guard(self.bridge.async_client, self.spec)
        run._warned = set()  # noqa: SLF001
        return run

    def get_instructions(self) -> Any:
        def instructions(ctx: RunContext[Any]) -> str:
            if self.guard is None:
                return ""
            return instructions_text(None, self.guard.rules(), self._turn.notes) or ""

        return instructions

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        try:
            result = await handler()
        finally:
            if self.guard is not None:
                await self.bridge.run(self.guard.finish("answered"))
        if self.guard is not None and self.guard.stop is not None:
            _put_stop(result, dataclasses.asdict(self.guard.stop))
        return result

    async def before_node_run(self, ctx: RunContext[Any], *, node: AgentNode[Any]) -> AgentNode[Any]:
        # Before the step prepares its tools, so the last round's stop is known by then; this
        # hook (unlike wrap_node_run) also fires for the last model request of run_stream().
        if self.guard is not None and isinstance(node, ModelRequestNode):
            self._turn = await self.bridge.run(self.guard.begin_model_call())
        return node

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        return tool_defs if self._turn.tools_allowed else []

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: WrapModelRequestHandler
    ) -> ModelResponse:
        if (ending := self._turn.ending_stop) is not None:
            return ModelResponse(parts=[TextPart(ending.reason)])
        return await handler(request_context)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        if self.guard is None:
            return await handler(args)
        call_id, decision = await self.bridge.run(self.guard.propose(call.tool_name, args))
        if not decision.allowed:
            return refusal_text(decision)
        try:
            result = await handler(args)
        except (CallDeferred, ApprovalRequired):
            raise  # not run yet: no result to report (a result never seen counts as new)
        except Exception as exc:
            await self.bridge.run(self.guard.report(call_id, call.tool_name, False, None))
            if isinstance(exc, ModelRetry) or isinstance(exc.__cause__, ModelRetry):  # a retry spent
                self._warn_retries(call.tool_name, ctx.max_retries)
            raise
        await self.bridge.run(self.guard.report(call_id, call.tool_name, True, result))
        return result

    def _warn_retries(self, tool: str, max_retries: int) -> None:
        """Once per tool: its retries end the run before stallwatch's failure rule could stop it."""
        threshold = (self.spec.policy or {}).get(
            "no_progress_threshold", V1_DEFAULTS["no_progress_threshold"]
        )
        if max_retries >= threshold or tool in self._warned:
            return
        self._warned.add(tool)
        log.warning(
            "stallwatch: tool %r allows %d retries: PydanticAI ends the run with "
            "UnexpectedModelBehavior at its failure %d in a row, before stallwatch's stop "
            "after %d; give it retries=%d or more (Agent(retries=...) or the tool's own), or "
            "raise ToolFailed for a failure the model should only see",
            tool,
            max_retries,
            max_retries + 1,
            threshold,
            threshold,
        )


def _put_stop(result: AgentRunResult[Any], stop: dict[str, Any]) -> None:
    """The stop in the run's metadata, where PydanticAI keeps what belongs to one run."""
    if result.metadata is not None:
        result.metadata["stallwatch_stop"] = stop
    else:  # no metadata was given to the run: PydanticAI keeps it in the run's state
        result._state.metadata = {"stallwatch_stop": stop}  # noqa: SLF001
