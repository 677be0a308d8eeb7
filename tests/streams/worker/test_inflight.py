"""Pausing: one batch in flight per partition; a failed or cancelled batch is the loop's failure."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from streams.worker.inflight import InFlight
from streams.worker.progress import Progress
from tests.streams.worker.fake_kafka import FakeConsumer

TP = TopicPartition("events", 0)


async def test_a_partition_is_paused_while_its_batch_is_in_flight_and_resumed_after():
    consumer = FakeConsumer([TP])
    in_flight = InFlight(consumer, Progress())
    gate = asyncio.Event()
    in_flight.start(TP, gate.wait())  # type: ignore[arg-type]
    assert 0 in in_flight and TP in consumer.paused
    gate.set()
    await in_flight.settle()
    await asyncio.sleep(0)  # the done callback
    assert 0 not in in_flight and TP not in consumer.paused and in_flight.failure is None


async def test_a_cancelled_batch_is_a_failure_and_leaves_its_partition_paused():
    consumer = FakeConsumer([TP])
    in_flight = InFlight(consumer, Progress())
    in_flight.start(TP, asyncio.sleep(10))  # type: ignore[arg-type]
    next(iter(in_flight._tasks.values())).cancel()
    await in_flight.settle()
    await asyncio.sleep(0)
    assert isinstance(in_flight.failure, asyncio.CancelledError)
    assert TP in consumer.paused


async def test_a_failed_batch_is_the_loops_failure():
    consumer = FakeConsumer([TP])
    in_flight = InFlight(consumer, Progress())

    async def fails() -> None:
        raise RuntimeError("boom")

    in_flight.start(TP, fails())
    await in_flight.settle()
    await asyncio.sleep(0)
    assert isinstance(in_flight.failure, RuntimeError) and TP in consumer.paused


async def test_a_stop_abandons_a_batch_stuck_past_its_time_and_that_is_no_failure():
    consumer = FakeConsumer([TP])
    in_flight = InFlight(consumer, Progress())
    in_flight.start(TP, asyncio.sleep(10))  # type: ignore[arg-type]  # a broker that never answers
    assert await in_flight.drain(0.05) == 1
    await asyncio.sleep(0.01)  # the cancellation lands, then the done callback
    assert 0 not in in_flight and in_flight.failure is None and TP in consumer.paused


async def test_a_held_partition_stays_paused_after_its_batch():
    consumer = FakeConsumer([TP])
    in_flight = InFlight(consumer, Progress())
    in_flight.held.add(0)  # dropped after a timed-out transaction, waiting to be rebuilt
    in_flight.start(TP, asyncio.sleep(0))  # type: ignore[arg-type]
    await in_flight.settle()
    await asyncio.sleep(0)
    assert in_flight.failure is None and TP in consumer.paused
