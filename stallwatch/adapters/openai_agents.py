"""OpenAI Agents SDK: tool guardrails judge each call, run hooks mark the rounds of one run."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable
from typing import Any

try:
    import agents  # noqa: F401  (a missing framework is named with the extra that brings it)
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"stallwatch.adapters.openai_agents needs the [openai-agents] extra (no module "
        f"{exc.name!r}): pip install 'stallwatch[openai-agents]'",
        name=exc.name,
    ) from exc
from agents import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResult,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.items import ModelResponse
from agents.tool import resolve_function_tool_failure_error_function, set_function_tool_failure_error_function

from stallwatch.adapters.core import Bridge, Guard, RunSpec, instructions_text, refusal_text
from stallwatch.client.run import Client
from stallwatch.client.sync import SyncClient
from stallwatch.contract.commands import Stop


class TurnEnded(Exception):
    """Raised from the run hooks when stallwatch's stop says `end_turn`: the model is not called."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.reason)
        self.stop = stop


class StallwatchRun(RunHooks[Any]):
    """One stallwatch run for one `Runner.run`: use a new one per run.

        watch = StallwatchRun(client, tools=[{"name": "wait_for_researchers", "repeat_exempt": True}])
        result = await watch.run(agent, "question", hooks=my_hooks)  # or, for run_sync/run_streamed:
        result = Runner.run_sync(watch.agent(agent), "question", hooks=watch.hooks(my_hooks))
        if watch.stop: ...  # the run was stopped: its code and words (also after it ended)

    A tool's failure is seen however the SDK reports it: the text of the tool's own
    `failure_error_function` or the SDK's default one, or (with `failure_error_function=None`) the
    exception that ends the run; `run()` ends the stallwatch run whatever happens.

    `agent()` returns a copy of the agent whose function tools carry stallwatch's input guardrail
    (a refusal is rejected content with stallwatch's words) and output guardrail (the result's
    fingerprint), are disabled after a stop, and whose instructions carry the rules, the nudges
    and the stop's words. A round is one model call and the function calls in its response.
    """

    def __init__(
        self,
        client: Client | SyncClient,
        *,
        mode: str = "researcher",
        tools: Iterable[dict[str, Any]] = (),
        policy: dict[str, Any] | None = None,
        run_id: str | None = None,
        run_id_prefix: str = "openai-agents",
        tell_rules: bool = True,
    ) -> None:
        self.bridge = Bridge(client)
        self.guard = Guard(
            self.bridge.async_client, RunSpec(mode, tuple(tools), policy, run_id_prefix, tell_rules), run_id
        )
        self._tool_names: list[str] = []
        self._call_ids: dict[str, str] = {}  # the SDK's tool call id -> stallwatch's call id
        self._failed: set[str] = set()  # the SDK's ids of calls whose tool raised
        self._calls_open = 0  # function calls of the open round not yet refused or reported
        self._turn_ready = False  # the coming model call's round is open (or the run stopped)
        # Tools are switched off only between rounds: the SDK checks a tool again before it runs
        # it, and a tool disabled after the model chose it fails the run (a stop that arrives
        # mid-round over Kafka would do that). A call made after the stop is refused instead.
        self._tools_off = False
        self._notes: list[str] = []
        self._input: ToolInputGuardrail[Any] = ToolInputGuardrail(self._judge_input, name="stallwatch")
        self._output: ToolOutputGuardrail[Any] = ToolOutputGuardrail(self._judge_output, name="stallwatch")

    @property
    def stop(self) -> Stop | None:
        return self.guard.stop

    async def run(
        self, agent: Agent[Any], input: Any, *, hooks: RunHooks[Any] | None = None, **runner_kwargs: Any
    ) -> RunResult:
        """`Runner.run` of the guarded agent with this run's hooks (and the caller's `hooks`,
        called after stallwatch's). The stallwatch run is ended however the SDK's run ends."""
        try:
            return await Runner.run(self.agent(agent), input, hooks=self.hooks(hooks), **runner_kwargs)
        finally:
            await self.finish("ended")  # after an answer the hooks ended it already: nothing to do

    def hooks(self, mine: RunHooks[Any] | None = None) -> RunHooks[Any]:
        """This run's hooks, chained with the caller's own (called after stallwatch's)."""
        return self if mine is None else _BothHooks(self, mine)

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of `agent` guarded for this run (the original is left as it was). Its function
        tools are guarded; the tools of agents it hands off to are not."""
        if self.guard.run is not None:
            raise RuntimeError("a StallwatchRun serves one run: make a new one for the next")
        tools = [self._guarded(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
        self._tool_names = [t.name for t in tools if isinstance(t, FunctionTool)]
        base = agent.instructions

        async def instructions(ctx: RunContextWrapper[Any], current: Agent[Any]) -> str:
            text = base(ctx, current) if callable(base) else base
            if inspect.isawaitable(text):
                text = await text
            await self._prepare_turn()
            return instructions_text(text, self.guard.rules(), self._notes) or ""

        return agent.clone(tools=tools, instructions=instructions)

    def _guarded(self, tool: FunctionTool) -> FunctionTool:
        enabled = tool.is_enabled

        async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
            if self._tools_off:
                return False  # the model answers from what it gathered
            if callable(enabled):
                result = enabled(ctx, agent)
                return bool(await result if inspect.isawaitable(result) else result)
            return bool(enabled)

        guarded = dataclasses.replace(
            tool,
            is_enabled=is_enabled,
            tool_input_guardrails=[*(tool.tool_input_guardrails or []), self._input],
            tool_output_guardrails=[*(tool.tool_output_guardrails or []), self._output],
        )
        formatter = resolve_function_tool_failure_error_function(tool)
        if formatter is not None:  # None: the exception ends the run, and `run()` ends ours
            set_function_tool_failure_error_function(guarded, self._noting_failures(formatter))
        return guarded

    def _noting_failures(self, formatter: Any) -> Any:
        """The tool's failure formatter (its own or the SDK's default), noting which call failed:
        the text it returns can be anything, so the text alone cannot tell a failure."""

        def failed(ctx: RunContextWrapper[Any], error: Exception) -> Any:
            call_id = getattr(ctx, "tool_call_id", None)
            if call_id is not None:
                self._failed.add(call_id)
            return formatter(ctx, error)

        return failed

    # -- rounds ------------------------------------------------------------------------------------

    async def _prepare_turn(self) -> None:
        """Once per model call, before it: close the open round, open this call's round."""
        if self._turn_ready:
            return
        self._turn_ready = True
        turn = await self.bridge.run(self.guard.begin_model_call(self._tool_names))
        self._notes = turn.notes

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        await self._prepare_turn()  # when the instructions were not asked for
        stop = self.guard.stop
        if stop is not None and stop.action == "end_turn":
            await self.finish("turn ended")
            raise TurnEnded(stop)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self._turn_ready = False
        self._calls_open = sum(
            1
            for item in response.output
            if getattr(item, "type", None) == "function_call"
            and getattr(item, "name", None) in self._tool_names
        )
        if self._calls_open == 0:
            await self._close_round()

    async def _call_done(self) -> None:
        """The round closes when its last call is refused or reported, so that a stop it causes
        is known before the next turn's tools are chosen."""
        self._calls_open -= 1
        if self._calls_open <= 0:
            await self._close_round()

    async def _close_round(self) -> None:
        await self.bridge.run(self.guard.end_round())
        self._tools_off = self.guard.stop is not None

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        await self.finish("answered")

    async def finish(self, reason: str | None = None) -> None:
        """End the run (done by the hooks when the agent answers; call it after an exception)."""
        await self.bridge.run(self.guard.finish(reason))

    # -- calls ---------------------------------------------------------------------------------------

    async def _judge_input(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        call_id, decision = await self.bridge.run(self.guard.propose(ctx.tool_name, ctx.tool_arguments))
        if decision.allowed:
            self._call_ids[ctx.tool_call_id] = call_id
            return ToolGuardrailFunctionOutput.allow()
        await self._call_done()
        return ToolGuardrailFunctionOutput.reject_content(
            refusal_text(decision), output_info={"code": decision.code}
        )

    async def _judge_output(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        call_id = self._call_ids.pop(ctx.tool_call_id, None)
        if call_id is not None:
            failed = ctx.tool_call_id in self._failed
            self._failed.discard(ctx.tool_call_id)
            await self.bridge.run(self.guard.report(call_id, ctx.tool_name, not failed, data.output))
            await self._call_done()
        return ToolGuardrailFunctionOutput.allow()


class _BothHooks(RunHooks[Any]):
    """stallwatch's run hooks, then the caller's, for every hook the SDK calls."""

    def __init__(self, first: RunHooks[Any], second: RunHooks[Any]) -> None:
        self.first, self.second = first, second


def _chained(name: str) -> Any:
    async def hook(self: _BothHooks, *args: Any, **kwargs: Any) -> None:
        await getattr(self.first, name)(*args, **kwargs)
        await getattr(self.second, name)(*args, **kwargs)

    hook.__name__ = name
    return hook


for _name in [n for n in dir(RunHooks) if n.startswith("on_")]:
    setattr(_BothHooks, _name, _chained(_name))
