"""The PydanticAI capability on a real Agent, driven by PydanticAI's own FunctionModel."""

from __future__ import annotations

import logging

import pytest
from pydantic_ai import Agent, ModelRetry, UnexpectedModelBehavior

from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.pydantic_ai_model import QUESTION, agent_for, model_for


def test_run_sync_through_the_sync_client():
    script, tools = scripts.rewording(), scripts.Tools()
    with SyncClient(EmbeddedClient) as client:
        result = agent_for(script, tools, Stallwatch(client)).run_sync(QUESTION)
    scripts.assert_stopped_then_answered(script, tools, result.output)


async def test_a_streamed_run_is_stopped_the_same_way():
    script, tools = scripts.rewording(), scripts.Tools()
    async with (
        EmbeddedClient() as client,
        agent_for(script, tools, Stallwatch(client)).run_stream(QUESTION) as streamed,
    ):
        answer = await streamed.get_output()
    scripts.assert_stopped_then_answered(script, tools, answer)


async def test_the_result_says_whether_and_why_the_run_was_stopped():
    async with EmbeddedClient() as client:
        capability = Stallwatch(client)
        stopped = await agent_for(scripts.rewording(), scripts.Tools(), capability).run(QUESTION)
        answered = await agent_for(scripts.paging(), scripts.Tools(), capability).run(
            QUESTION, metadata={"mine": 1}
        )
    assert stopped.metadata["stallwatch_stop"]["code"] == "no_new_facts"
    assert stopped.metadata["stallwatch_stop"]["reason"] == scripts.STOP_WORDS
    assert answered.metadata == {"mine": 1}


def _retrying_agent(
    script: scripts.Script, tools: scripts.Tools, capability: Stallwatch, retries: int
) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model_for(script), capabilities=[capability])

    @agent.tool_plain(retries=retries)
    def fetch(url: str) -> str:
        """Fetch a page."""
        try:
            return tools.fetch(url)
        except scripts.FetchFailed as exc:
            raise ModelRetry(str(exc)) from exc  # PydanticAI's idiom: try again

    return agent


async def test_a_tool_retried_fewer_times_than_the_failure_rule_is_named(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="stallwatch.adapters.pydantic_ai")
    tools = scripts.Tools()
    async with EmbeddedClient() as client:
        with pytest.raises(UnexpectedModelBehavior):
            await _retrying_agent(scripts.failing(), tools, Stallwatch(client), retries=1).run(QUESTION)
        assert not client.runs  # released
    (said,) = [r.getMessage() for r in caplog.records]
    assert "'fetch' allows 1 retries" in said and "retries=5" in said
    assert tools.ran["fetch"] == 2


async def test_a_tool_retried_enough_is_stopped_by_the_failure_rule(caplog: pytest.LogCaptureFixture):
    script, tools = scripts.failing(), scripts.Tools()
    async with EmbeddedClient() as client:
        result = await _retrying_agent(script, tools, Stallwatch(client), retries=5).run(QUESTION)
    scripts.assert_failures_stopped(script, tools, result.output)
    assert result.metadata["stallwatch_stop"]["code"] == "tool_failures"
    assert not caplog.records


async def test_a_tool_that_raises_ends_the_agent_run_and_leaves_no_run_held():
    script, tools = scripts.failing(), scripts.Tools()
    async with EmbeddedClient() as client:
        agent: Agent[None, str] = Agent(model_for(script), capabilities=[Stallwatch(client)])

        @agent.tool_plain
        def fetch(url: str) -> str:
            """Fetch a page."""
            return tools.fetch(url)  # raises: PydanticAI lets a plain exception end the run

        for _ in range(3):
            with pytest.raises(scripts.FetchFailed):
                await agent.run(QUESTION)
        assert not client.runs
