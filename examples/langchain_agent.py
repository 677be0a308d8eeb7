"""A LangChain agent guarded by stallwatch: one middleware, plain `invoke` (no asyncio).

    python examples/langchain_agent.py            # in-process engine, no broker
    python examples/langchain_agent.py --kafka    # through Kafka and a running worker

The model is a stub that rewords one search every turn (use any chat model instead: the
middleware line stays the same); the search returns the same documents every time. stallwatch
nudges it, then removes its tools, and the stub answers from what it gathered.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from stallwatch.adapters.langchain import StallwatchMiddleware
from stallwatch.client import EmbeddedClient, KafkaClient, SyncClient


def search(query: str) -> str:
    """Search the documents."""
    return '{"documents": [{"id": "kafka-docs"}, {"id": "faust-docs"}]}'


class RewordingModel(GenericFakeChatModel):
    """Calls `search` with a new wording while it has tools; answers when they are taken away."""

    wording: Any = itertools.count(1)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[getattr(t, "name", t) for t in tools], **kwargs)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        told = [
            line
            for m in messages
            if m.type == "system"
            for line in m.text.splitlines()
            if line.startswith("stallwatch:")
        ]
        print("\n".join(f"the model is told: {line}" for line in told) or "(nothing from stallwatch)")
        if kwargs.get("tools"):
            n = next(self.wording)
            call = {"name": "search", "args": {"query": f"kafka log compaction (wording {n})"}, "id": f"c{n}"}
            self.messages = iter([AIMessage("", tool_calls=[call])])
        else:
            self.messages = iter([AIMessage("Kafka compacts a topic by keeping each key's last value.")])
        return super()._generate(messages, stop, run_manager, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", action="store_true", help="use Kafka and a running worker")
    args = parser.parse_args()
    with SyncClient(KafkaClient if args.kafka else EmbeddedClient) as client:
        agent = create_agent(
            RewordingModel(messages=iter(())), [search], middleware=[StallwatchMiddleware(client)]
        )  # the one line
        result = agent.invoke({"messages": [{"role": "user", "content": "How does Kafka compact?"}]})
    print(f"answer: {result['messages'][-1].text}")


if __name__ == "__main__":
    main()
