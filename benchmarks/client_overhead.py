"""In-process overhead per tool call through EmbeddedClient, against a plain call of the same tool.

    python benchmarks/client_overhead.py [--calls 20000] [--repeat 5] [--per-round 1]

A researcher pages through a search tool (every page new, so nothing is refused or stopped):
once calling the tool directly, once guarded (start_round, propose, the tool, result,
end_round). Prints both per call, best of `--repeat`, and the difference: the overhead.
Times are the process's CPU time, not wall time: on a machine shared with other work, the
time other processes take the core would otherwise be counted. Indicative all the same.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Awaitable, Callable

from stallwatch.client import EmbeddedClient

# The client's 10 µs per-call target; printed beside the figure, never asserted.
TARGET_US = 10.0
# Large enough that the round limit never stops a long benchmark run.
POLICY = {"max_rounds": 10_000_000}


def search(query: str, page: int) -> dict:
    """The tool: a page of three documents, as a small search API would return it."""
    return {
        "query": query,
        "page": page,
        "documents": [{"id": f"doc-{page}-{i}", "title": f"Result {i} of page {page}"} for i in range(3)],
    }


async def plain(calls: int, per_round: int) -> None:
    for page in range(calls):
        args = {"query": "kafka log compaction", "page": page}  # as the model wrote them
        search(**args)


async def guarded(calls: int, per_round: int) -> None:
    async with EmbeddedClient() as client:
        run = await client.start_run("bench", "researcher", [{"name": "search"}], policy=POLICY)
        for first in range(0, calls, per_round):
            await run.start_round()
            for page in range(first, first + per_round):
                args = {"query": "kafka log compaction", "page": page}
                call_id, decision = await run.propose("search", args)
                if decision.allowed:
                    await run.result(call_id, "search", "ok", search(**args))
            await run.end_round()
        assert run.stop is None and decision.allowed, "the benchmark must measure allowed calls"


def best_per_call_us(
    loop: Callable[[int, int], Awaitable[None]], calls: int, per_round: int, repeat: int
) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        asyncio.run(loop(calls, per_round))
        times.append(time.process_time() - start)
    return min(times) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=1, help="calls in each round")
    args = parser.parse_args()
    calls = args.calls - args.calls % args.per_round
    base = best_per_call_us(plain, calls, args.per_round, args.repeat)
    with_client = best_per_call_us(guarded, calls, args.per_round, args.repeat)
    print(f"calls: {calls:,}, {args.per_round} per round, best of {args.repeat}")
    print(f"plain call of the tool:        {base:8.2f} µs per call")
    print(f"through EmbeddedClient:        {with_client:8.2f} µs per call")
    print(
        f"overhead:                      {with_client - base:8.2f} µs per call "
        f"(target at most {TARGET_US:g} µs)"
    )


if __name__ == "__main__":
    main()
