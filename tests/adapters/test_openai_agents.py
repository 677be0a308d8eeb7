"""The Agents SDK adapter on a real Runner, driven by the SDK's own ScriptedModel."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, RunHooks, Runner, function_tool

from stallwatch.adapters.openai_agents import StallwatchRun, TurnEnded
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.openai_agents_model import QUESTION, agent_for, run_agent


async def test_a_stop_that_ends_the_turn_raises_turn_ended_without_another_model_call():
    script = scripts.rewording()
    with pytest.raises(TurnEnded) as ended:
        await run_agent(script, tools := scripts.Tools(scripts.SLOW_SEARCH_S), scripts.OUT_OF_TIME)
    # (on a loaded machine the time can be up before the search is even proposed: then it is
    # refused, and the turn ends all the same)
    assert len(script.seen) == 1 and tools.ran["search"] <= 1
    assert ended.value.stop.code == "time_limit" and str(ended.value) == scripts.TIME_WORDS


def test_run_sync_through_the_sync_client():
    script, tools = scripts.rewording(), scripts.Tools()
    with SyncClient(EmbeddedClient) as client:
        watch = StallwatchRun(client)
        result = Runner.run_sync(watch.agent(agent_for(script, tools)), QUESTION, hooks=watch, max_turns=60)
    scripts.assert_stopped_then_answered(script, tools, result.final_output)


async def test_run_guards_the_agent_and_a_run_object_serves_one_run():
    script, tools = scripts.paging(), scripts.Tools()
    async with EmbeddedClient() as client:
        watch = StallwatchRun(client)
        result = await watch.run(agent_for(script, tools), QUESTION, max_turns=60)
        with pytest.raises(RuntimeError, match="one run"):
            watch.agent(agent_for(scripts.paging(), tools))
    scripts.assert_untouched(script, tools, "list_page", 12, result.final_output)


async def test_a_streamed_run_is_stopped_the_same_way():
    script, tools = scripts.rewording(), scripts.Tools()
    async with EmbeddedClient() as client:
        watch = StallwatchRun(client)
        streamed = Runner.run_streamed(
            watch.agent(agent_for(script, tools)), QUESTION, hooks=watch, max_turns=60
        )
        async for _ in streamed.stream_events():
            pass
    scripts.assert_stopped_then_answered(script, tools, streamed.final_output)


def _with_fetch(script: scripts.Script, tools: scripts.Tools, **fetch_options) -> Agent:
    """The test agent whose `fetch` has the caller's failure options (its own error text)."""
    agent = agent_for(script, tools)

    def fetch(url: str) -> str:
        """Fetch a page."""
        return tools.fetch(url)

    own = function_tool(fetch, **fetch_options)
    return agent.clone(tools=[t for t in agent.tools if t.name != "fetch"] + [own])


async def test_a_tool_with_its_own_failure_text_is_seen_failing():
    script, tools = scripts.failing(), scripts.Tools()
    agent = _with_fetch(script, tools, failure_error_function=lambda ctx, exc: "fetch is down, try later")
    async with EmbeddedClient() as client:
        watch = StallwatchRun(client)
        result = await watch.run(agent, QUESTION, max_turns=60)
    scripts.assert_failures_stopped(script, tools, result.final_output)
    assert watch.stop is not None and watch.stop.code == "tool_failures"


async def test_a_tool_whose_exception_ends_the_run_releases_it():
    script, tools = scripts.failing(), scripts.Tools()
    agent = _with_fetch(script, tools, failure_error_function=None)  # the SDK raises
    async with EmbeddedClient() as client:
        watch = StallwatchRun(client)
        with pytest.raises(Exception, match="did not answer"):
            await watch.run(agent, QUESTION, max_turns=60)
        assert not client.runs  # ended and forgotten


class CountingHooks(RunHooks[Any]):
    def __init__(self) -> None:
        self.model_calls = 0
        self.ended = 0

    async def on_llm_start(self, *args: Any) -> None:
        self.model_calls += 1

    async def on_agent_end(self, *args: Any) -> None:
        self.ended += 1


async def test_the_callers_own_run_hooks_are_called_too():
    script, tools = scripts.rewording(), scripts.Tools()
    mine = CountingHooks()
    async with EmbeddedClient() as client:
        watch = StallwatchRun(client)
        result = await watch.run(agent_for(script, tools), QUESTION, hooks=mine, max_turns=60)
    scripts.assert_stopped_then_answered(script, tools, result.final_output)
    assert mine.model_calls == len(script.seen) and mine.ended == 1
    assert watch.stop is not None and watch.stop.code == "no_new_facts"  # known after the end


def test_the_callers_hooks_with_run_sync():
    script, tools = scripts.rewording(), scripts.Tools()
    mine = CountingHooks()
    with SyncClient(EmbeddedClient) as client:
        watch = StallwatchRun(client)
        result = Runner.run_sync(
            watch.agent(agent_for(script, tools)), QUESTION, hooks=watch.hooks(mine), max_turns=60
        )
    scripts.assert_stopped_then_answered(script, tools, result.final_output)
    assert mine.model_calls == len(script.seen)
