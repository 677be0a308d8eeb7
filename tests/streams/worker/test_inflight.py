"""Pipelining: batches applied while their partition's transaction is in flight join the next one;
past the bound the partition is paused; a failed commit discards what is pending; a failed or
cancelled commit is the loop's failure."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import TopicPartition

from streams.worker.batch import BatchResult
from streams.worker.commit import Applied
from streams.worker.inflight import PENDING_MAX_RECORDS, InFlight
from streams.worker.progress import Progress
from tests.streams.worker.fake_kafka import FakeConsumer

TP = TopicPartition("events", 0)


def batch(last_offset: int, records: int = 1) -> Applied:
    return Applied(records, last_offset, BatchResult(), None, [], 0.0)  # type: ignore[arg-type]


class Commits:
    """A commit step that waits for `gate` and records the batches of each transaction."""

    def __init__(self, ok: bool = True) -> None:
        self.gate = asyncio.Event()
        self.ok = ok
        self.transactions: list[list[int]] = []
        self.observed: list[int] = []

    async def __call__(self, tp: TopicPartition, batches: Sequence[Applied]) -> bool:
        self.transactions.append([b.last_offset for b in batches])
        await self.gate.wait()
        return self.ok

    def observe(self, applied: Applied) -> None:
        self.observed.append(applied.last_offset)


async def settled(in_flight: InFlight) -> None:
    await in_flight.settle()
    await asyncio.sleep(0)  # the done callbacks


async def test_batches_applied_during_a_transaction_join_the_next_one_unpaused():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress()), Commits()
    in_flight.add(TP, batch(0), commits, commits.observe)
    await asyncio.sleep(0)
    in_flight.add(TP, batch(1), commits, commits.observe)
    in_flight.add(TP, batch(2), commits, commits.observe)
    assert TP not in consumer.paused and in_flight  # no pause while the transaction is in flight
    commits.gate.set()
    await settled(in_flight)
    assert commits.transactions == [[0], [1, 2]] and commits.observed == [0, 1, 2]
    assert not in_flight and in_flight.failure is None and in_flight.next_offset[0] == 3


async def test_a_partition_past_the_bound_of_pending_records_is_paused_until_its_commit():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress()), Commits()
    in_flight.add(TP, batch(0), commits, commits.observe)
    await asyncio.sleep(0)
    in_flight.add(TP, batch(PENDING_MAX_RECORDS, PENDING_MAX_RECORDS), commits, commits.observe)
    assert TP in consumer.paused
    commits.gate.set()
    await settled(in_flight)
    assert TP not in consumer.paused and commits.transactions == [[0], [PENDING_MAX_RECORDS]]


async def test_a_rebuild_discards_what_was_applied_on_top_of_the_failed_batches():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress()), Commits(ok=False)
    in_flight.add(TP, batch(0), commits, commits.observe)
    await asyncio.sleep(0)
    in_flight.add(TP, batch(1), commits, commits.observe)  # applied on top of batch 0
    epoch = in_flight.epoch.get(0, 0)
    in_flight.rebuilding(TP)  # what the failed commit does before it rebuilds
    assert TP in consumer.paused and 0 in in_flight
    in_flight.rebuilt(TP, 0)
    assert in_flight.epoch[0] > epoch and in_flight.next_offset[0] == 0
    commits.gate.set()
    await settled(in_flight)
    assert commits.transactions == [[0]] and commits.observed == []  # batch 1 never committed
    assert TP not in consumer.paused and in_flight.failure is None


async def test_a_cancelled_commit_is_a_failure_and_leaves_its_partition_paused():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress()), Commits()
    in_flight.add(TP, batch(0), commits, commits.observe)
    await asyncio.sleep(0)
    next(iter(in_flight._tasks.values())).cancel()
    await settled(in_flight)
    assert isinstance(in_flight.failure, asyncio.CancelledError)
    assert TP in consumer.paused


async def test_a_failed_commit_is_the_loops_failure():
    consumer = FakeConsumer([TP])
    in_flight = InFlight(consumer, Progress())

    async def fails(tp: TopicPartition, batches: Sequence[Applied]) -> bool:
        raise RuntimeError("boom")

    in_flight.add(TP, batch(0), fails, lambda applied: None)
    await settled(in_flight)
    assert isinstance(in_flight.failure, RuntimeError) and TP in consumer.paused


async def test_a_stop_abandons_a_commit_stuck_past_its_time_and_that_is_no_failure():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress()), Commits()  # a broker that never answers
    in_flight.add(TP, batch(0), commits, commits.observe)
    assert await in_flight.drain(0.05) == 1
    await asyncio.sleep(0.01)  # the cancellation lands, then the done callback
    assert not in_flight and in_flight.failure is None and TP in consumer.paused


async def test_a_held_partition_stays_paused_after_its_commit():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress()), Commits()
    in_flight.add(TP, batch(0), commits, commits.observe)
    in_flight.rebuilding(TP)  # dropped after a timed-out transaction, waiting to be rebuilt
    commits.gate.set()
    await settled(in_flight)
    assert in_flight.failure is None and TP in consumer.paused


def ahead_batch(last_offset: int) -> Applied:
    return Applied(1, last_offset, BatchResult(), None, [], 0.0, ahead=True)  # type: ignore[arg-type]


async def test_transactions_of_batches_published_ahead_begin_a_commit_interval_apart():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress(), commit_interval_s=0.2), Commits()
    commits.gate.set()
    loop = asyncio.get_running_loop()
    began = loop.time()
    in_flight.add(TP, ahead_batch(0), commits, commits.observe)  # the first commits at once
    await asyncio.sleep(0.01)
    for offset in (1, 2, 3):  # applied meanwhile: they wait out the interval, then go together
        in_flight.add(TP, ahead_batch(offset), commits, commits.observe)
        await asyncio.sleep(0.01)
    assert commits.transactions == [[0]]
    await settled(in_flight)
    assert commits.transactions == [[0], [1, 2, 3]] and commits.observed == [0, 1, 2, 3]
    assert loop.time() - began >= 0.2


async def test_a_batch_whose_verdicts_wait_for_its_transaction_is_committed_at_once():
    consumer = FakeConsumer([TP])
    in_flight, commits = InFlight(consumer, Progress(), commit_interval_s=60.0), Commits()
    commits.gate.set()
    in_flight.add(TP, ahead_batch(0), commits, commits.observe)
    await asyncio.sleep(0.01)
    in_flight.add(TP, batch(1), commits, commits.observe)  # its commands are in the transaction
    await asyncio.wait_for(settled(in_flight), 5)
    assert commits.transactions == [[0], [1]]
