"""The LangChain middleware on a real `create_agent` graph, driven by LangChain's fake chat model."""

from __future__ import annotations

import pytest
from langchain_core.messages import SystemMessage

from stallwatch.adapters.langchain import StallwatchMiddleware, _appended
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.langchain_model import agent_for

QUESTION = {"messages": [{"role": "user", "content": "How does Kafka compact a topic?"}]}


async def run_agent(script: scripts.Script, tools: scripts.Tools | None = None,
                    policy: dict | None = None) -> tuple[scripts.Tools, str]:
    tools = tools or scripts.Tools()
    async with EmbeddedClient() as client:
        agent = agent_for(script, tools, StallwatchMiddleware(client, tools=scripts.DECLARED, policy=policy))
        out = await agent.ainvoke(QUESTION, {"recursion_limit": 100})
        assert not client.runs  # the run was ended and forgotten
    return tools, out["messages"][-1].text


async def test_a_rewording_model_is_stopped_then_answers_without_tools():
    script = scripts.rewording()
    tools, answer = await run_agent(script)
    scripts.assert_stopped_then_answered(script, tools, answer)


async def test_a_repeated_call_is_refused_with_the_words_shown_to_the_model():
    script = scripts.repeating()
    tools, answer = await run_agent(script)
    scripts.assert_repeat_refused(script, tools, answer)


async def test_one_of_two_identical_parallel_calls_is_refused():
    script = scripts.parallel_repeat()
    tools, answer = await run_agent(script)
    scripts.assert_repeat_refused(script, tools, answer)


async def test_a_paging_model_runs_to_the_end_untouched():
    script = scripts.paging()
    tools, answer = await run_agent(script)
    scripts.assert_untouched(script, tools, "list_page", 12, answer)


async def test_a_repeat_exempt_wait_is_never_refused():
    script = scripts.waiting()
    tools, answer = await run_agent(script)
    scripts.assert_untouched(script, tools, "wait_for_researchers", 8, answer)


async def test_failures_of_one_tool_stop_the_run():
    script = scripts.failing()
    tools, answer = await run_agent(script)
    scripts.assert_failures_stopped(script, tools, answer)


async def test_a_stop_that_ends_the_turn_calls_the_model_no_more():
    script = scripts.rewording()
    tools, answer = await run_agent(script, scripts.Tools(scripts.SLOW_SEARCH_S), scripts.OUT_OF_TIME)
    # (on a loaded machine the time can be up before the search is even proposed: then it is
    # refused, and the turn ends all the same)
    assert len(script.seen) == 1 and tools.ran["search"] <= 1
    assert answer == scripts.TIME_WORDS  # the stop's words are the agent's last message


def test_invoke_without_asyncio_through_the_sync_client():
    script, tools = scripts.rewording(), scripts.Tools()
    with SyncClient(EmbeddedClient) as client:
        agent = agent_for(script, tools, StallwatchMiddleware(client))
        out = agent.invoke(QUESTION, {"recursion_limit": 100})
    scripts.assert_stopped_then_answered(script, tools, out["messages"][-1].text)


def test_invoke_with_an_asyncio_client_says_what_to_use():
    agent = agent_for(scripts.paging(), scripts.Tools(), StallwatchMiddleware(EmbeddedClient()))
    with pytest.raises(TypeError, match="SyncClient"):
        agent.invoke(QUESTION)


async def test_a_streamed_run_is_stopped_the_same_way():
    script, tools = scripts.rewording(), scripts.Tools()
    async with EmbeddedClient() as client:
        agent = agent_for(script, tools, StallwatchMiddleware(client))
        last = None
        async for update in agent.astream(QUESTION, {"recursion_limit": 100}, stream_mode="values"):
            last = update
    scripts.assert_stopped_then_answered(script, tools, last["messages"][-1].text)


def test_the_words_follow_a_system_message_made_of_blocks():
    blocks = [{"type": "text", "text": "You research.", "cache_control": {"type": "ephemeral"}}]
    message = _appended(SystemMessage(content=blocks), "stallwatch: Nothing new.")
    assert message.content == [*blocks, {"type": "text", "text": "stallwatch: Nothing new."}]
    assert _appended(SystemMessage(content="You research."), "x").content == "You research.\n\nx"
    assert _appended(None, "x").content == "x"
