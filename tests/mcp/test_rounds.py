"""The round rule of the MCP proxy, in-process: calls close together in time are one round.
The gap runs out when the test says (`Gap`), and a call runs until the test lets it end."""

from __future__ import annotations

import asyncio

from stallwatch.client import EmbeddedClient
from stallwatch.mcp.rounds import Rounds
from tests.waiting import until

GAP_S = 0.05


class Gap:
    """The round gap as the test decides: a closer's wait ends at `run_out`, however long it took."""

    def __init__(self) -> None:
        self.out = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        await self.out.wait()

    async def run_out(self, rounds: Rounds) -> None:
        """The gap after the last call runs out; returns once the round has been looked at."""
        self.out.set()
        await rounds.wait_closed()
        self.out.clear()


async def call(rounds: Rounds, args: dict, running: asyncio.Event | None = None) -> None:
    """One call as the proxy makes it: proposed inside its round, run (until `running` is set,
    when given), reported."""
    await rounds.call_starts()
    try:
        call_id, decision = await rounds.run.propose("search", args)
        if running is not None:
            await running.wait()
        if decision.allowed:
            await rounds.run.result(call_id, "search", "ok", {"docs": [1]})
    finally:
        rounds.call_ends()


async def started() -> tuple[EmbeddedClient, Rounds, Gap]:
    client = EmbeddedClient()
    run = await client.start_run("r", "researcher", [{"name": "search"}])
    gap = Gap()
    return client, Rounds(run, GAP_S, gap.sleep), gap


async def test_calls_one_after_another_within_the_gap_are_one_round_that_ends_after_it():
    client, rounds, gap = await started()
    for i in range(4):
        await call(rounds, {"q": i})
    state = client.engine.runs["r"]
    assert (state.round, state.round_open, state.round_proposed) == (1, True, 4)
    await gap.run_out(rounds)
    assert not state.round_open and not rounds.open


async def test_overlapping_calls_are_one_round_even_when_longer_than_the_gap():
    client, rounds, gap = await started()
    first, second = asyncio.Event(), asyncio.Event()
    calls = [
        asyncio.create_task(call(rounds, {"q": 1}, first)),
        asyncio.create_task(call(rounds, {"q": 2}, second)),
        asyncio.create_task(call(rounds, {"q": 3})),
    ]
    await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)  # the third, which does not wait
    gap.out.set()  # from now on any gap runs out at once: the calls outlast it
    second.set()
    await calls[1]
    assert rounds.open  # the first is still in flight
    first.set()
    await asyncio.gather(*calls)
    state = client.engine.runs["r"]
    assert (state.round, state.round_proposed) == (1, 3)


async def test_a_quiet_gap_separates_rounds_and_streaks_count_per_round():
    client, rounds, gap = await started()
    for i in range(3):
        await call(rounds, {"q": i})
        await gap.run_out(rounds)
    state = client.engine.runs["r"]
    assert (state.round, state.round_open, state.already_seen_streak) == (3, False, 2)


async def test_a_call_in_flight_keeps_the_round_open_past_the_gap():
    client, rounds, gap = await started()
    running = asyncio.Event()
    slow = asyncio.create_task(call(rounds, {"q": "slow"}, running))
    await until(lambda: rounds.in_flight, 10, "the slow call started")
    await call(rounds, {"q": "quick"})
    await gap.run_out(rounds)  # past the gap after the quick call, the slow one still runs
    assert rounds.open and client.engine.runs["r"].round_open
    running.set()
    await slow
    await rounds.close()
    assert client.engine.runs["r"].round == 1 and not client.engine.runs["r"].round_open
