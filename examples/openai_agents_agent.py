"""An OpenAI Agents SDK agent guarded by stallwatch: a copy of the agent, and the run's hooks.

    python examples/openai_agents_agent.py            # in-process engine, no broker
    python examples/openai_agents_agent.py --kafka    # through Kafka and a running worker

The model is the SDK's ScriptedModel rewording one search every turn (use any model instead:
the two stallwatch lines stay the same); the search returns the same documents every time.
stallwatch nudges it, then switches its tools off, and the model answers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from stallwatch.adapters.openai_agents import StallwatchRun
from stallwatch.client import EmbeddedClient, KafkaClient


@function_tool
def search(query: str) -> str:
    """Search the documents."""
    return '{"documents": [{"id": "kafka-docs"}, {"id": "faust-docs"}]}'


def rewording_model() -> ScriptedModel:
    wording = itertools.count(1)

    def respond(call: ModelCall) -> list:
        lines = (call.system_instructions or "").splitlines()
        told = [line for line in lines if line.startswith("stallwatch:")]
        print("\n".join(f"the model is told: {line}" for line in told) or "(nothing from stallwatch)")
        if not call.tools:
            return [assistant_message("Kafka compacts a topic by keeping each key's last value.")]
        n = next(wording)
        return [function_call("search", {"query": f"kafka log compaction (wording {n})"}, call_id=f"c{n}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(20)])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", action="store_true", help="use Kafka and a running worker")
    args = parser.parse_args()
    set_tracing_disabled(True)  # the example makes no network call
    agent = Agent(
        name="researcher", instructions="You research questions.", model=rewording_model(), tools=[search]
    )
    async with KafkaClient() if args.kafka else EmbeddedClient() as client:
        watch = StallwatchRun(client)  # one per run
        result = await Runner.run(watch.agent(agent), "How does Kafka compact?", hooks=watch)
    print(f"answer: {result.final_output}")


if __name__ == "__main__":
    asyncio.run(main())
