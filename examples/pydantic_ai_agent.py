"""A PydanticAI agent guarded by stallwatch: one capability.

    python examples/pydantic_ai_agent.py            # in-process engine, no broker
    python examples/pydantic_ai_agent.py --kafka    # through Kafka and a running worker

The model is PydanticAI's FunctionModel rewording one search every step (use any model
instead: the capability line stays the same); the search returns the same documents every
time. stallwatch nudges it, then removes its tools, and the model answers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient, KafkaClient

wording = itertools.count(1)


def rewording_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    told = [line for line in (info.instructions or "").splitlines() if line.startswith("stallwatch:")]
    print("\n".join(f"the model is told: {line}" for line in told) or "(nothing from stallwatch)")
    if not info.function_tools:
        return ModelResponse(parts=[TextPart("Kafka compacts a topic by keeping each key's last value.")])
    n = next(wording)
    return ModelResponse(parts=[ToolCallPart("search", {"query": f"kafka log compaction (wording {n})"})])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", action="store_true", help="use Kafka and a running worker")
    args = parser.parse_args()
    async with KafkaClient() if args.kafka else EmbeddedClient() as client:
        agent = Agent(
            FunctionModel(rewording_model),
            instructions="You research questions.",
            capabilities=[Stallwatch(client)],
        )  # the one line

        @agent.tool_plain
        def search(query: str) -> str:
            """Search the documents."""
            return '{"documents": [{"id": "kafka-docs"}, {"id": "faust-docs"}]}'

        result = await agent.run("How does Kafka compact?")
    print(f"answer: {result.output}")


if __name__ == "__main__":
    asyncio.run(main())
