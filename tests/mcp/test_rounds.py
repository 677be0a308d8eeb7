"""The round rule of the MCP proxy, in-process: calls close together in time are one round."""

from __future__ import annotations

import asyncio

from stallwatch.client import EmbeddedClient
from stallwatch.mcp.rounds import Rounds

GAP_S = 0.05


async def call(rounds: Rounds, args: dict, seconds: float = 0.0) -> None:
    """One call as the proxy makes it: proposed inside its round, run, reported."""
    await rounds.call_starts()
    try:
        call_id, decision = await rounds.run.propose("search", args)
        await asyncio.sleep(seconds)
        if decision.allowed:
            await rounds.run.result(call_id, "search", "ok", {"docs": [1]})
    finally:
        rounds.call_ends()


async def started() -> tuple[EmbeddedClient, Rounds]:
    client = EmbeddedClient()
    run = await client.start_run("r", "researcher", [{"name": "search"}])
    return client, Rounds(run, GAP_S)


async def test_calls_one_after_another_within_the_gap_are_one_round_that_ends_after_it():
    client, rounds = await started()
    for i in range(4):
        await call(rounds, {"q": i})
    state = client.fleet.runs["r"]
    assert (state.round, state.round_open, state.round_proposed) == (1, True, 4)
    await asyncio.sleep(2 * GAP_S)
    assert not state.round_open and not rounds.open


async def test_overlapping_calls_are_one_round_even_when_longer_than_the_gap():
    client, rounds = await started()
    await asyncio.gather(
        call(rounds, {"q": 1}, seconds=3 * GAP_S),
        call(rounds, {"q": 2}, seconds=GAP_S),
        call(rounds, {"q": 3}),
    )
    state = client.fleet.runs["r"]
    assert (state.round, state.round_proposed) == (1, 3)


async def test_a_quiet_gap_separates_rounds_and_streaks_count_per_round():
    client, rounds = await started()
    for i in range(3):
        await call(rounds, {"q": i})
        await asyncio.sleep(2 * GAP_S)
    state = client.fleet.runs["r"]
    assert (state.round, state.round_open, state.already_seen_streak) == (3, False, 2)


async def test_a_call_in_flight_keeps_the_round_open_past_the_gap():
    client, rounds = await started()
    slow = asyncio.create_task(call(rounds, {"q": "slow"}, seconds=4 * GAP_S))
    await asyncio.sleep(GAP_S / 2)
    await call(rounds, {"q": "quick"})
    await asyncio.sleep(2 * GAP_S)  # past the gap after the quick call, the slow one still runs
    assert rounds.open and client.fleet.runs["r"].round_open
    await slow
    await rounds.close()
    assert client.fleet.runs["r"].round == 1 and not client.fleet.runs["r"].round_open
