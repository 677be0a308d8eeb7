"""The LangChain middleware on a real `create_agent` graph, driven by LangChain's fake chat model."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain_core.messages import SystemMessage
from langchain_core.tools import StructuredTool

from stallwatch.adapters.langchain import StallwatchMiddleware, _appended
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.langchain_model import QUESTION, ScriptedChatModel, agent_for


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


async def test_the_result_says_whether_and_why_the_run_was_stopped():
    async with EmbeddedClient() as client:
        middleware = StallwatchMiddleware(client)
        stopped = await agent_for(scripts.rewording(), scripts.Tools(), middleware).ainvoke(
            QUESTION, {"recursion_limit": 100}
        )
        answered = await agent_for(scripts.paging(), scripts.Tools(), middleware).ainvoke(
            QUESTION, {"recursion_limit": 100}
        )
    assert stopped["stallwatch_stop"]["code"] == "no_new_facts"
    assert stopped["stallwatch_stop"]["reason"] == scripts.STOP_WORDS
    assert answered["stallwatch_stop"] is None


def test_the_sync_result_says_it_too():
    with SyncClient(EmbeddedClient) as client:
        out = agent_for(scripts.failing(), scripts.Tools(), StallwatchMiddleware(client)).invoke(
            QUESTION, {"recursion_limit": 100}
        )
    assert out["stallwatch_stop"]["code"] == "tool_failures"


def _raising_agent(middleware: StallwatchMiddleware):
    def fetch(url: str) -> str:
        raise RuntimeError(f"{url} did not answer")  # no handle_tool_error: LangChain re-raises

    tool = StructuredTool.from_function(fetch, name="fetch", description="Fetch a page.")
    model = ScriptedChatModel(messages=iter(()), script=scripts.failing())
    return create_agent(model, [tool], middleware=[middleware])


async def test_a_tool_that_raises_leaves_no_run_held():
    async with EmbeddedClient() as client:
        middleware = StallwatchMiddleware(client)
        for _ in range(3):
            with pytest.raises(RuntimeError, match="did not answer"):
                await _raising_agent(middleware).ainvoke(QUESTION)
        assert not middleware.guards and not client.runs


def test_a_tool_that_raises_under_invoke_leaves_no_run_held():
    with SyncClient(EmbeddedClient) as client:
        middleware = StallwatchMiddleware(client)
        with pytest.raises(RuntimeError, match="did not answer"):
            _raising_agent(middleware).invoke(QUESTION)
        assert not middleware.guards and not client.client.runs


async def test_chat_mode_words_say_the_calls_were_refused_not_that_the_tool_failed():
    script, tools = scripts.Script([("search", {"q": "kafka compaction"})] * 10), scripts.Tools()
    async with EmbeddedClient() as client:
        out = await agent_for(script, tools, StallwatchMiddleware(client, mode="chat")).ainvoke(
            QUESTION, {"recursion_limit": 100}
        )
    stop = out["stallwatch_stop"]
    assert stop["code"] == "tool_failures" and tools.ran["search"] == 2  # the rest were refused
    last = script.seen[-1]
    assert last.tools == [] and stop["reason"] in last.instructions
    assert "refused" in stop["reason"] and "failed 5 times" not in stop["reason"]
