"""An agent loop guarded by stallwatch: a researcher that keeps rewording one search.

    python examples/research_agent.py            # in-process engine, no broker
    python examples/research_agent.py --kafka    # through Kafka and a running worker

The "model" here is a stub that rewords its query every round; the "search tool" returns the
same documents every time. stallwatch refuses exact repeats and stops the run after five
rounds that brought nothing new, telling the model to answer from what it has.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

from stallwatch.client import Client, EmbeddedClient, KafkaClient

TOOLS = [{"name": "search"}, {"name": "wait_for_researchers", "repeat_exempt": True}]


def search(query: str) -> dict:
    return {
        "documents": [
            {"id": "kafka-docs", "title": "Kafka: a distributed log"},
            {"id": "faust-docs", "title": "Faust: stream processing in Python"},
        ]
    }


async def research(client: Client) -> int:
    run = await client.start_run(f"example-{uuid.uuid4().hex[:8]}", "researcher", TOOLS)
    print("system prompt addendum:\n" + run.system_prompt() + "\n")
    # As the README's loop: through Kafka the stop comes a moment after its round, at the latest
    # with the next call's refusal.
    while run.stop is None and run.round < 21:
        await run.start_round()
        query = f"how does kafka store streams (wording {run.round})"
        call_id, decision = await run.propose("search", {"query": query})
        if decision.allowed:
            await run.result(call_id, "search", "ok", search(query))  # only the fingerprint leaves
            print(f"round {run.round}: searched {query!r}")
        else:
            print(f"round {run.round}: refused ({decision.code}): {decision.reason}")
        await run.end_round()
    await run.end("answered")
    if run.stop is None:
        print(f"no stop in {run.round} rounds: {client.health()['verdicts']}", file=sys.stderr)
        return 1
    print(f"\nstopped at round {run.stop.round} ({run.stop.code}, {run.stop.action}):\n{run.stop.reason}")
    return 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", action="store_true", help="use Kafka and a running worker")
    args = parser.parse_args()
    async with KafkaClient() if args.kafka else EmbeddedClient() as client:
        if isinstance(client, KafkaClient) and not client.connected:
            return 1  # the client said why, in one line: failing open, it would allow every call
        return await research(client)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
