"""PydanticAI's own FunctionModel, each response chosen by a Script from what the model was given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient
from tests.adapters import scripts
from tests.adapters.scripts import ANSWER, FetchFailed, Script, Seen, Tools


def model_for(script: Script) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        recent = (
            [str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)]
            if isinstance(last, ModelRequest)
            else []
        )
        calls = script.next(Seen([t.name for t in info.function_tools], info.instructions or "", recent))
        if calls is None:
            return ModelResponse(parts=[TextPart(ANSWER)])
        turn = len(script.seen)
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"tc-{turn}-{i}")
                for i, (name, args) in enumerate(calls)
            ]
        )

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        for i, part in enumerate(respond(messages, info).parts):
            if isinstance(part, TextPart):
                yield part.content
            else:
                assert isinstance(part, ToolCallPart)
                args = json.dumps(part.args)
                yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}

    return FunctionModel(respond, stream_function=stream)


def agent_for(script: Script, tools: Tools, capability: Stallwatch | None) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        model_for(script),
        instructions="You research questions.",
        capabilities=[capability] if capability else [],
    )

    @agent.tool_plain
    def search(q: str) -> str:
        """Search documents."""
        return tools.search(q)

    @agent.tool_plain
    def list_page(page: int) -> str:
        """Read a page of documents."""
        return tools.list_page(page)

    @agent.tool_plain
    def wait_for_researchers() -> str:
        """Wait for the researchers."""
        return tools.wait_for_researchers()

    @agent.tool_plain
    def fetch(url: str) -> str:
        """Fetch a page."""
        try:
            return tools.fetch(url)
        except FetchFailed as exc:
            raise ToolFailed(str(exc)) from exc  # PydanticAI's idiom: a failed result the model sees

    return agent


QUESTION = "How does Kafka compact a topic?"


async def run_agent(
    script: scripts.Script, tools: scripts.Tools | None = None, policy: dict | None = None
) -> tuple[scripts.Tools, str]:
    tools = tools or scripts.Tools()
    async with EmbeddedClient() as client:
        capability = Stallwatch(client, tools=scripts.DECLARED, policy=policy)
        result = await agent_for(script, tools, capability).run(QUESTION)
        assert not client.runs  # the run was ended and forgotten
    return tools, result.output
