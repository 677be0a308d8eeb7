"""The Kafka client with the broker away, on the project's real broker: it fails open at once on
every call, says so once in its log, and recovers when the broker comes back (and again when it
goes away under a running client).

The test starts and stops a broker of its own, on STALLWATCH_KAFKA_PORT + 2, so that the broker
the rest of the suite uses never goes down under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stallwatch.client import KafkaClient
from stallwatch.client.kafka import stop_quietly
from stallwatch.client.run import Run
from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.kafka_harness import ROOT
from tests.waiting import until

# The outage broker is started and stopped by these tests: one xdist worker runs them all.
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("outage-broker")]

PORT = int(os.environ.get("STALLWATCH_KAFKA_PORT", "9092")) + 2
VERDICT_TIMEOUT_S = 2.0
TOOLS = [{"name": "search"}]


def broker(command: str) -> None:
    env = {
        **os.environ,
        "STALLWATCH_KAFKA_PORT": str(PORT),
        "STALLWATCH_KAFKA_CONTROLLER_PORT": str(PORT + 1),
    }
    subprocess.run([str(ROOT / "deploy/kafka/kafka.sh"), command], check=True, timeout=300, env=env)


@contextlib.asynccontextmanager
async def engine(settings: Settings) -> AsyncIterator[None]:
    """The detector behind a plain consume-apply-produce loop on the real broker: enough of a
    worker to answer the client, with the real engine."""
    consumer = AIOKafkaConsumer(
        settings.events_topic,
        bootstrap_servers=settings.bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    )
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, linger_ms=0)
    await consumer.start()
    await producer.start()
    fleet = EmbeddedEngine()

    async def loop() -> None:
        while True:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for record in records:
                    out = fleet.handle_raw(record.value)
                    for command in [] if isinstance(out, Rejected) else out:
                        await producer.send(settings.commands_topic, encode_command(command), key=record.key)
            await producer.flush()

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await stop_quietly(consumer)  # the broker is down by now
        await stop_quietly(producer)


async def timed_propose(run, args) -> tuple[float, object]:
    start = time.monotonic()
    _, decision = await run.propose("search", args)
    return time.monotonic() - start, decision


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "stallwatch.client.kafka" and r.levelno >= logging.WARNING
    ]


async def judged_run(client: KafkaClient) -> Run | None:
    """A new run whose call the worker allowed and whose repeat it refused, or None when either
    verdict timed out (a busy machine's worker may answer its first calls late)."""
    run = await client.start_run(f"away-2-{uuid.uuid4().hex[:6]}", "researcher", TOOLS)
    await run.start_round()
    _, first = await run.propose("search", {"q": "kafka"})
    _, again = await run.propose("search", {"q": "kafka"})
    if first.timed_out or again.timed_out:
        return None
    assert first.allowed and (again.allowed, again.code) == (False, "duplicate_call")
    return run


async def test_the_client_fails_open_while_the_broker_is_away_and_recovers(caplog):
    caplog.set_level(logging.WARNING)
    broker("down")
    settings = Settings(
        bootstrap=f"127.0.0.1:{PORT}",
        topic_prefix=f"t{uuid.uuid4().hex[:10]}",
        partitions=2,
        replication_factor=1,
        min_insync_replicas=1,
    )
    client = KafkaClient(settings, verdict_timeout_s=VERDICT_TIMEOUT_S)
    try:
        start = time.monotonic()
        await client.start()  # nothing listens: no error, no wait
        run = await client.start_run("away-1", "researcher", TOOLS)  # was a ZeroDivisionError
        assert time.monotonic() - start < VERDICT_TIMEOUT_S and not client.connected
        await run.start_round()
        for i in range(5):
            took, decision = await timed_propose(run, {"q": i})
            assert decision.allowed and decision.timed_out and "cannot be reached" in decision.reason
            assert took < VERDICT_TIMEOUT_S
        await run.end_round()
        said = warnings_of(caplog)
        assert len(said) == 1 and "every call is allowed" in said[0]

        broker("up")
        await ensure_topics(settings)
        async with engine(settings):
            await until(lambda: client.connected, 60, "the client reconnected", interval_s=0.2)
            assert any("answers again" in m for m in warnings_of(caplog)[1:])
            back = await until(
                lambda: judged_run(client), 60, "a run judged by the worker again", interval_s=0.2
            )

            broker("down")  # away again, under a running client
            caplog.clear()
            for i in range(4):
                took, decision = await timed_propose(back, {"q": f"down {i}"})
                assert decision.allowed and decision.timed_out
                # Bounded by the verdict timeout, with a busy machine's margin: unbounded, a call
                # would wait for a verdict that never comes.
                assert took < 2 * VERDICT_TIMEOUT_S
            assert len([m for m in warnings_of(caplog) if "every call is allowed" in m]) == 1
    finally:
        await client.stop()
        broker("down")
