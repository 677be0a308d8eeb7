"""The LangChain middleware on a real `create_agent` graph, driven by LangChain's fake chat model."""

from __future__ import annotations

import pytest
from langchain_core.messages import SystemMessage

from stallwatch.adapters.langchain import StallwatchMiddleware, _appended
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.langchain_model import QUESTION, agent_for


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
