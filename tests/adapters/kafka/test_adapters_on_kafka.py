"""One run of each adapter through the real local broker and a `stallwatch worker` process."""

from __future__ import annotations

import pytest
from agents import Runner

from stallwatch.adapters.langchain import StallwatchMiddleware
from stallwatch.adapters.openai_agents import StallwatchRun
from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import KafkaClient, SyncClient
from stallwatch.settings import Settings
from tests.adapters import langchain_model, openai_agents_model, pydantic_ai_model, scripts

pytestmark = pytest.mark.kafka

QUESTION = "How does Kafka compact a topic?"
VERDICT_TIMEOUT_S = 20  # far above the worker's latency: a timeout (failing open) would fail the test


def test_langchain_invoke_through_a_sync_kafka_client(worker_settings: Settings):
    script, tools = scripts.rewording(), scripts.Tools()
    with SyncClient(lambda: KafkaClient(worker_settings, VERDICT_TIMEOUT_S)) as client:
        agent = langchain_model.agent_for(script, tools, StallwatchMiddleware(client))
        out = agent.invoke({"messages": [{"role": "user", "content": QUESTION}]}, {"recursion_limit": 100})
    scripts.assert_stopped_then_answered(script, tools, out["messages"][-1].text)


async def test_openai_agents_through_kafka(worker_settings: Settings):
    script, tools = scripts.rewording(), scripts.Tools()
    async with KafkaClient(worker_settings, VERDICT_TIMEOUT_S) as client:
        watch = StallwatchRun(client)
        result = await Runner.run(
            watch.agent(openai_agents_model.agent_for(script, tools)), QUESTION, hooks=watch, max_turns=60
        )
    scripts.assert_stopped_then_answered(script, tools, result.final_output)


async def test_pydantic_ai_through_kafka(worker_settings: Settings):
    script, tools = scripts.rewording(), scripts.Tools()
    async with KafkaClient(worker_settings, VERDICT_TIMEOUT_S) as client:
        result = await pydantic_ai_model.agent_for(script, tools, Stallwatch(client)).run(QUESTION)
    scripts.assert_stopped_then_answered(script, tools, result.output)
