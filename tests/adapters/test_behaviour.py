"""What every adapter promises, on each framework driven by its own scripted model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from stallwatch.client import EmbeddedClient
from stallwatch.engine.admin_policy import AdminPolicy
from tests.adapters import langchain_model, openai_agents_model, pydantic_ai_model, scripts

Runner = Callable[..., Awaitable[tuple[scripts.Tools, str]]]
RUNNERS: dict[str, Runner] = {
    "langchain": langchain_model.run_agent,
    "openai-agents": openai_agents_model.run_agent,
    "pydantic-ai": pydantic_ai_model.run_agent,
}


@pytest.fixture(params=sorted(RUNNERS))
def run_agent(request: pytest.FixtureRequest) -> Runner:
    return RUNNERS[request.param]


async def test_a_rewording_model_is_stopped_then_answers_without_tools(run_agent: Runner):
    script = scripts.rewording()
    tools, answer = await run_agent(script)
    scripts.assert_stopped_then_answered(script, tools, answer)


async def test_a_repeated_call_is_refused_with_the_words_shown_to_the_model(run_agent: Runner):
    script = scripts.repeating()
    tools, answer = await run_agent(script)
    scripts.assert_repeat_refused(script, tools, answer)


async def test_one_of_two_identical_parallel_calls_is_refused(run_agent: Runner):
    script = scripts.parallel_repeat()
    tools, answer = await run_agent(script)
    scripts.assert_repeat_refused(script, tools, answer)


async def test_a_paging_model_runs_to_the_end_untouched(run_agent: Runner):
    script = scripts.paging()
    tools, answer = await run_agent(script)
    scripts.assert_untouched(script, tools, "list_page", 12, answer)


async def test_a_repeat_exempt_wait_is_never_refused(run_agent: Runner):
    script = scripts.waiting()
    tools, answer = await run_agent(script)
    scripts.assert_untouched(script, tools, "wait_for_researchers", 8, answer)


async def test_failures_of_one_tool_stop_the_run(run_agent: Runner):
    script = scripts.failing()
    tools, answer = await run_agent(script)
    scripts.assert_failures_stopped(script, tools, answer)


@pytest.mark.parametrize("framework", ["langchain", "pydantic-ai"])  # the SDK raises: its own test
async def test_a_stop_that_ends_the_turn_calls_the_model_no_more(framework: str):
    script = scripts.rewording()
    tools, answer = await RUNNERS[framework](
        script, scripts.Tools(scripts.SLOW_SEARCH_S), scripts.OUT_OF_TIME
    )
    # (on a loaded machine the time can be up before the search is even proposed: then it is
    # refused, and the turn ends all the same)
    assert len(script.seen) == 1 and tools.ran["search"] <= 1
    assert answer == scripts.TIME_WORDS  # the stop's words are the run's last message


async def test_an_observe_only_run_of_a_looping_model_runs_to_its_end_untouched(run_agent: Runner):
    """Every adapter gets observe-only from the engine: no refusal, nudge or stop reaches the model."""
    script = scripts.rewording()
    tools, answer = await run_agent(script, None, {"observe_only": True})
    scripts.assert_untouched(script, tools, "search", 20, answer)
    assert not any("refused" in s.instructions for s in script.seen)  # no rules told either


async def test_an_observe_only_repeat_runs_untouched(run_agent: Runner):
    script = scripts.repeating()
    tools, answer = await run_agent(script, None, {"observe_only": True})
    scripts.assert_untouched(script, tools, "search", 2, answer)


async def test_an_observe_only_run_tells_the_model_no_rules():
    async with EmbeddedClient(AdminPolicy(observe_only_tenants=frozenset({"acme"}))) as client:
        watched = await client.start_run("watched", tenant="acme")
        guarded = await client.start_run("guarded", tenant="globex")
        own = await client.start_run("own", policy={"observe_only": True})
    assert watched.system_prompt() == own.system_prompt() == ""
    assert "refused" in guarded.system_prompt()
    assert watched.policy.observe_only and not guarded.policy.observe_only
