"""The README's agent loop, as written, with both clients: it ends on the run's stop and runs no
call after it, in process and through a worker (where the stop arrives a moment after its round,
at the latest with the next call's refusal, which is never run)."""

from __future__ import annotations

import pytest

from stallwatch.client import EmbeddedClient, KafkaClient
from stallwatch.client.run import Run
from tests.kafka_harness import serving_worker

DOCS = {"docs": ["the same page"]}


async def readme_loop(run: Run, max_rounds: int = 40) -> tuple[int, int]:
    """README.md's loop, a researcher that searches the same thing every round: (calls run,
    rounds started)."""
    ran = 0
    while run.stop is None and run.round < max_rounds:
        await run.start_round()
        call_id, decision = await run.propose("search", {"q": "kafka log compaction"})
        if decision.allowed:
            ran += 1
            await run.result(call_id, "search", "ok", DOCS)
        await run.end_round()
    return ran, run.round


async def test_the_readme_loop_ends_on_the_stop_in_process():
    async with EmbeddedClient() as client:
        run = await client.start_run("readme-run", "researcher", tools=[{"name": "search"}])
        ran, rounds = await readme_loop(run)
    assert run.stop is not None and rounds < 40 and ran == 1


@pytest.mark.kafka
async def test_the_readme_loop_ends_on_the_stop_through_a_worker_with_no_call_run_after_it():
    async with EmbeddedClient() as client:
        reference = await client.start_run("readme-run", "researcher", tools=[{"name": "search"}])
        ran_in_process, rounds_in_process = await readme_loop(reference)
    async with serving_worker(partitions=2) as (settings, _), KafkaClient(settings) as client:
        run = await client.start_run("readme-run", "researcher", tools=[{"name": "search"}])
        ran, rounds = await readme_loop(run)
    assert run.stop is not None and reference.stop is not None
    assert run.stop.code == reference.stop.code
    assert ran == ran_in_process  # the call of the round after the stop, if any, was refused
    assert rounds in (rounds_in_process, rounds_in_process + 1)
