"""The PydanticAI capability on a real Agent, driven by PydanticAI's own FunctionModel."""

from __future__ import annotations

from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.pydantic_ai_model import agent_for

QUESTION = "How does Kafka compact a topic?"


async def run_agent(script: scripts.Script, tools: scripts.Tools | None = None,
                    policy: dict | None = None) -> tuple[scripts.Tools, str]:
    tools = tools or scripts.Tools()
    async with EmbeddedClient() as client:
        capability = Stallwatch(client, tools=scripts.DECLARED, policy=policy)
        result = await agent_for(script, tools, capability).run(QUESTION)
        assert not client.runs  # the run was ended and forgotten
    return tools, result.output


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
    assert answer == scripts.TIME_WORDS  # the stop's words are the run's output


def test_run_sync_through_the_sync_client():
    script, tools = scripts.rewording(), scripts.Tools()
    with SyncClient(EmbeddedClient) as client:
        result = agent_for(script, tools, Stallwatch(client)).run_sync(QUESTION)
    scripts.assert_stopped_then_answered(script, tools, result.output)


async def test_a_streamed_run_is_stopped_the_same_way():
    script, tools = scripts.rewording(), scripts.Tools()
    async with EmbeddedClient() as client, agent_for(script, tools, Stallwatch(client)).run_stream(
            QUESTION) as streamed:
        answer = await streamed.get_output()
    scripts.assert_stopped_then_answered(script, tools, answer)
