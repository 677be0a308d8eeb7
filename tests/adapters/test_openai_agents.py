"""The Agents SDK adapter on a real Runner, driven by the SDK's own ScriptedModel."""

from __future__ import annotations

import pytest
from agents import Runner

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
        result = Runner.run_sync(watch.agent(agent_for(script, tools)), QUESTION, hooks=watch,
                                 max_turns=60)
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
        streamed = Runner.run_streamed(watch.agent(agent_for(script, tools)), QUESTION, hooks=watch,
                                       max_turns=60)
        async for _ in streamed.stream_events():
            pass
    scripts.assert_stopped_then_answered(script, tools, streamed.final_output)
