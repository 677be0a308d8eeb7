"""Failing open never starves the event loop: a caller that retries at once while the broker is
away still lets the client's own reconnection (and anything else on the loop) run."""

from __future__ import annotations

import asyncio

from stallwatch.client import KafkaClient
from stallwatch.settings import Settings
from tests.addresses import free_port


async def test_a_tight_retry_loop_while_failing_open_lets_other_tasks_run():
    # Nothing listens on this port: the client fails open from its start.
    settings = Settings(bootstrap=f"127.0.0.1:{free_port()}")
    turns = 0

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)  # a turn of the loop: what the test counts

    async with KafkaClient(settings, verdict_timeout_s=0.5) as client:
        ticker = asyncio.create_task(other_task())
        try:
            for i in range(200):  # what the demo's warm-up did: retry at once on an open decision
                run = await client.start_run(f"warmup-{i}", "chat", [{"name": "get_price"}])
                _, decision = await run.propose("get_price", {"symbol": "WARM"})
                await run.end("warm-up")
                assert decision.allowed
        finally:
            ticker.cancel()
    assert turns >= 200, f"the loop turned {turns} times for 200 fail-open calls"
