"""The PydanticAI capability on a real Agent, driven by PydanticAI's own FunctionModel."""

from __future__ import annotations

from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient, SyncClient
from tests.adapters import scripts
from tests.adapters.pydantic_ai_model import QUESTION, agent_for


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
