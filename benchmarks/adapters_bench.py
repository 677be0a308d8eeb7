"""The framework adapters' overhead per tool call, in process (EmbeddedClient). Prints figures.

For each framework, an agent driven by the framework's own scripted model (as in the tests)
makes N tool calls, one per round: the bare agent (no extension), the agent with a no-op
extension using the same hooks, and the agent with the stallwatch adapter. The model pages
through a list, so every call is new: nothing is refused and nothing stops. Figures are per
call: a run's CPU time divided by N, over R interleaved runs.

What a user measures is "overhead": stallwatch minus the bare agent (the median over runs made
one after the other). It splits into the framework's own hook mechanism (no-op hooks minus the
bare agent: paid by any extension), the client and engine (one round of the bare client:
start_round, propose, result, end_round; the same for every framework), and the adapter's own
glue (the rest). LangChain's `invoke` through a `SyncClient` is measured too: each hook crosses
to the client's loop thread and back.

    python benchmarks/adapters_bench.py [--calls 20] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dataclasses
from typing import Any

from agents import (
    Agent,
    RunHooks,
    Runner,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolOutputGuardrail,
)
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.usage import UsageLimits

from stallwatch.adapters.langchain import StallwatchMiddleware, StallwatchState
from stallwatch.adapters.openai_agents import StallwatchRun
from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import langchain_model, openai_agents_model, pydantic_ai_model, scripts

# Rounds beyond the default limit of 40: the benchmark's runs must never be stopped.
POLICY = {"max_rounds": 1_000_000}


async def timed(once: Callable[[], Awaitable[None]]) -> float:
    """CPU time of this process: what other processes on a shared machine do is not counted."""
    start = time.process_time()
    await once()
    return time.process_time() - start


async def best_of(repeat: int, once: Callable[[], Awaitable[None]]) -> float:
    return min([await timed(once) for _ in range(repeat)])


async def each_variant(
    repeat: int, run: Callable[[int, str], Awaitable[None]], calls: int
) -> list[list[float]]:
    """`repeat` runs of each variant, interleaved so that the load of a shared machine falls on
    all alike."""
    times: list[list[float]] = [[], [], []]
    for _ in range(repeat):
        for i, variant in enumerate(VARIANTS):
            times[i].append(await timed(lambda variant=variant: run(calls, variant)))
    return times


VARIANTS = ("none", "noop", "stallwatch")


# -- no-op extensions with the adapters' hooks -----------------------------------------------------


class NoopMiddleware(AgentMiddleware):
    state_schema = StallwatchState

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"stallwatch_run_id": "noop"}

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        return None

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


class NoopSyncMiddleware(NoopMiddleware):
    """The same no-op hooks for LangChain's `invoke`."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"stallwatch_run_id": "noop"}

    def after_agent(self, state: Any, runtime: Any) -> None:
        return None

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)


class NoopHooks(RunHooks[Any]):
    async def on_llm_start(self, *args: Any) -> None:
        return None

    async def on_llm_end(self, *args: Any) -> None:
        return None

    async def on_agent_end(self, *args: Any) -> None:
        return None


def noop_agent(agent: Agent[Any]) -> Agent[Any]:
    allow = ToolGuardrailFunctionOutput.allow()
    guard_in = ToolInputGuardrail(lambda data: allow, name="noop")
    guard_out = ToolOutputGuardrail(lambda data: allow, name="noop")

    async def enabled(ctx: Any, agent: Any) -> bool:
        return True

    async def instructions(ctx: Any, agent: Any) -> str:
        return base

    base = agent.instructions
    tools = [
        dataclasses.replace(
            t, is_enabled=enabled, tool_input_guardrails=[guard_in], tool_output_guardrails=[guard_out]
        )
        for t in agent.tools
    ]
    return agent.clone(tools=tools, instructions=instructions)


class NoopCapability(AbstractCapability[Any]):
    def get_instructions(self) -> Any:
        return lambda ctx: ""

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        return await handler()

    async def wrap_node_run(self, ctx: Any, *, node: Any, handler: Any) -> Any:
        return await handler(node)

    async def prepare_tools(self, ctx: Any, tool_defs: Any) -> Any:
        return tool_defs

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> Any:
        return await handler(request_context)

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        return await handler(args)


async def langchain_run(calls: int, variant: str) -> None:
    script, tools = scripts.paging(calls), scripts.Tools()
    async with EmbeddedClient() as client:
        middleware = {
            "none": None,
            "noop": NoopMiddleware(),
            "stallwatch": StallwatchMiddleware(client, policy=POLICY),
        }[variant]
        agent = langchain_model.agent_for(script, tools, middleware)
        await agent.ainvoke(
            {"messages": [{"role": "user", "content": "go"}]}, {"recursion_limit": 3 * calls + 10}
        )
    assert tools.ran["list_page"] == calls


_SYNC_CLIENT: SyncClient | None = None  # one for the whole benchmark, as an application has


async def langchain_invoke_run(calls: int, variant: str) -> None:
    """LangChain's `invoke` (no asyncio in the caller), stallwatch through a SyncClient."""
    global _SYNC_CLIENT
    if _SYNC_CLIENT is None:
        _SYNC_CLIENT = await asyncio.to_thread(SyncClient, EmbeddedClient)
    script, tools = scripts.paging(calls), scripts.Tools()
    middleware = {
        "none": None,
        "noop": NoopSyncMiddleware(),
        "stallwatch": StallwatchMiddleware(_SYNC_CLIENT, policy=POLICY),
    }[variant]
    agent = langchain_model.agent_for(script, tools, middleware)
    agent.invoke({"messages": [{"role": "user", "content": "go"}]}, {"recursion_limit": 3 * calls + 10})
    assert tools.ran["list_page"] == calls


async def openai_agents_run(calls: int, variant: str) -> None:
    script, tools = scripts.paging(calls), scripts.Tools()
    agent = openai_agents_model.agent_for(script, tools, steps=calls + 1)
    async with EmbeddedClient() as client:
        if variant == "stallwatch":
            watch = StallwatchRun(client, policy=POLICY)
            await Runner.run(watch.agent(agent), "go", hooks=watch, max_turns=calls + 5)
        elif variant == "noop":
            await Runner.run(noop_agent(agent), "go", hooks=NoopHooks(), max_turns=calls + 5)
        else:
            await Runner.run(agent, "go", max_turns=calls + 5)
    assert tools.ran["list_page"] == calls


async def pydantic_ai_run(calls: int, variant: str) -> None:
    script, tools = scripts.paging(calls), scripts.Tools()
    async with EmbeddedClient() as client:
        capability = {
            "none": None,
            "noop": NoopCapability(),
            "stallwatch": Stallwatch(client, policy=POLICY),
        }[variant]
        await pydantic_ai_model.agent_for(script, tools, capability).run(
            "go", usage_limits=UsageLimits(request_limit=calls + 5)
        )
    assert tools.ran["list_page"] == calls


async def bare_client_round(calls: int) -> None:
    tools = scripts.Tools()
    async with EmbeddedClient() as client:
        run = await client.start_run("bench", "researcher", [{"name": "list_page"}], POLICY)
        for page in range(1, calls + 1):
            await run.start_round()
            call_id, _ = await run.propose("list_page", {"page": page})
            await run.result(call_id, "list_page", "ok", tools.list_page(page))
            await run.end_round()


async def langchain_hooks_direct(calls: int) -> dict[str, float]:
    """CPU seconds per model call + tool call of LangChain's middleware hooks alone, called with
    handlers that return at once (no graph, no model): the glue and the client, which the load of a
    shared machine blurs far less than a whole agent's run. Keys: variant and path."""
    requests: dict[str, Any] = {}

    class Capture(NoopMiddleware):
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            requests.setdefault("model", request)
            return await handler(request)

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            requests.setdefault("tool", request)
            return await handler(request)

    tools = scripts.Tools()
    await langchain_model.agent_for(scripts.paging(2), tools, Capture()).ainvoke(
        {"messages": [{"role": "user", "content": "go"}]}
    )
    answer, content = AIMessage(content="done"), tools.list_page(1)

    def tool_answer(request: Any) -> ToolMessage:
        return ToolMessage(content=content, tool_call_id=request.tool_call["id"], name="list_page")

    async def amodel(request: Any) -> AIMessage:
        return answer

    async def atool(request: Any) -> ToolMessage:
        return tool_answer(request)

    def requests_for(state: dict[str, Any], page: int) -> tuple[Any, Any]:
        model = requests["model"].override(state={**requests["model"].state, **state})
        tool = requests["tool"]
        call = {**tool.tool_call, "args": {"page": page}}
        return model, dataclasses.replace(tool, state={**tool.state, **state}, tool_call=call)

    out: dict[str, float] = {}
    sync_client = SyncClient(EmbeddedClient)
    async with EmbeddedClient() as client:
        for variant, middleware in (
            ("noop", NoopSyncMiddleware()),
            ("stallwatch", StallwatchMiddleware(client, policy=POLICY)),
            ("stallwatch+sync", StallwatchMiddleware(sync_client, policy=POLICY)),
        ):
            state = await middleware.abefore_agent({}, None)
            start = time.process_time()
            for page in range(calls):
                model, tool = requests_for(state, page)
                await middleware.awrap_model_call(model, amodel)
                await middleware.awrap_tool_call(tool, atool)
            out[f"{variant} ainvoke"] = (time.process_time() - start) / calls
            if variant == "stallwatch":
                continue  # an asyncio client serves no sync hook
            state = middleware.before_agent({}, None)
            start = time.process_time()
            for page in range(calls):
                model, tool = requests_for(state, page)
                middleware.wrap_model_call(model, lambda request: answer)
                middleware.wrap_tool_call(tool, tool_answer)
            out[f"{variant} invoke"] = (time.process_time() - start) / calls
    sync_client.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Short runs: every framework's cost per model call grows with the history, which would
    # bury the adapter's cost in the framework's.
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    n, r = args.calls, args.repeat
    us = 1e6 / n

    tools = scripts.Tools()
    plain_calls = 10_000  # enough calls for the clock: a single one takes a few µs
    start = time.process_time()
    for page in range(plain_calls):
        tools.list_page(page)
    plain_us = (time.process_time() - start) * 1e6 / plain_calls
    print(f"plain call of the tool:                 {plain_us:8.1f} µs")
    client_s = await best_of(r, lambda: bare_client_round(n))
    print(f"bare EmbeddedClient, one round, 1 call: {client_s * us:8.1f} µs\n")
    print(
        f"{'µs per call':<22}{'bare agent':>11}{'stallwatch':>11}{'overhead':>10}   of which:"
        f"{'hooks':>7}{'client':>8}{'adapter':>9}"
    )
    for name, run in (
        ("langchain", langchain_run),
        ("langchain invoke+sync", langchain_invoke_run),
        ("openai-agents", openai_agents_run),
        ("pydantic-ai", pydantic_ai_run),
    ):
        plain, noop, guarded = await each_variant(r, run, n)
        # Medians of the differences of runs made one after the other, which a drifting load on
        # the machine shifts less than it shifts the minima.
        overhead = statistics.median(g - p for g, p in zip(guarded, plain, strict=True))
        hooks = statistics.median(o - p for o, p in zip(noop, plain, strict=True))
        adapter = overhead - hooks - client_s
        print(
            f"{name:<22}{min(plain) * us:11.1f}{min(guarded) * us:11.1f}{overhead * us:10.1f}"
            f"{'':>13}{hooks * us:7.1f}{client_s * us:8.1f}{adapter * us:9.1f}"
        )
    if _SYNC_CLIENT is not None:
        _SYNC_CLIENT.close()
    direct = await langchain_hooks_direct(3000)
    noop_async, noop_sync = direct["noop ainvoke"], direct["noop invoke"]
    print(
        "\nLangChain's middleware hooks alone (one model call + one tool call, handlers that "
        "return at once), µs:\n"
        f"  no-op {noop_async * 1e6:.1f} (ainvoke), {noop_sync * 1e6:.1f} (invoke); stallwatch "
        f"beyond the no-op: ainvoke {(direct['stallwatch ainvoke'] - noop_async) * 1e6:.1f}, "
        f"ainvoke + SyncClient {(direct['stallwatch+sync ainvoke'] - noop_async) * 1e6:.1f}, "
        f"invoke + SyncClient {(direct['stallwatch+sync invoke'] - noop_sync) * 1e6:.1f} "
        f"(the client and engine included)"
    )
    print(
        "\nbare agent, stallwatch: best run. overhead: median of (stallwatch - bare agent) over "
        "paired runs, what a user measures; hooks: median of (no-op hooks - bare agent), the "
        "framework's extension mechanism; client: one round of the bare EmbeddedClient (the "
        "engine included); adapter: the rest, the adapter's own glue."
    )
    print(
        f"\n{n} calls per run, {r} runs each, CPU time of this process (in process, no"
        " broker); a shared machine: indicative figures."
    )


if __name__ == "__main__":
    asyncio.run(main())
