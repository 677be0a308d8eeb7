"""Publishing ahead, the pure commit logic with fakes: a batch's commands reach the commands topic
before its transaction begins, and only then does the transaction (everything else) commit; a
failed send or transaction rebuilds the partition and the batch read again publishes the same
bytes; records stamped with the producers' CreateTime are never published ahead."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
)
from aiokafka.structs import ConsumerRecord

from stallwatch.settings import Settings
from stallwatch_streams.worker.batch import LOG_APPEND_TIME, SourceMessage
from stallwatch_streams.worker.commit import Committed, Fenced
from stallwatch_streams.worker.task_state import TaskState
from tests.streams.worker.fake_kafka import FakeAheadProducer, FakeProducer
from tests.streams.worker.fake_tasks import SOURCE, FakePartition, FakePipeline
from tests.streams.worker.test_commit import looping_run, timed_out_partition
from tests.waiting import until


async def ahead_partition(fail: BaseException | None = None) -> tuple[FakePartition, FakeAheadProducer]:
    p = await FakePartition().serve()
    ahead = FakeAheadProducer(fail, transactional=p.committed)
    p.committer.ahead = ahead
    return p, ahead


async def test_commands_are_published_ahead_and_the_transaction_holds_the_rest():
    reference = await FakePartition().serve()  # commands in the transaction, as before
    assert await reference.commit(looping_run())
    p, ahead = await ahead_partition()
    applied = await p.committer.apply(p.task, looping_run())
    assert isinstance(await p.committer.commit(p.task, [applied]), Committed)
    assert applied.result.published_at is not None
    assert ahead.records("commands") == reference.committed.records("commands")
    assert p.committed.records("commands") == []
    assert p.committed.records("changelog") == reference.committed.records("changelog")
    assert all(partition == SOURCE.partition for _, partition, _, _ in ahead.sent)


@pytest.mark.parametrize(
    "error", [OutOfOrderSequenceNumber(), ProducerFenced()], ids=["out of order", "fenced"]
)
async def test_a_failed_ahead_send_replaces_its_producer_and_the_batch_is_read_again_with_the_same_bytes(
    error: Exception,
):
    # An idempotent producer that lost a send (the broker restarted under it) has every later
    # send refused as out of order: it is replaced, once, and the batch read again. Even a
    # fencing of it is a failure to rebuild from, not a question for the group: the producer is
    # the worker's, not the partition's.
    p, broken = await ahead_partition(error)
    replacement = FakeAheadProducer(transactional=p.committed)
    replaced: list[object] = []

    async def replace_ahead(old: object) -> FakeAheadProducer:
        replaced.append(old)
        return replacement

    p.committer.replace_ahead = replace_ahead
    assert not await p.commit(looping_run())
    assert p.restores == 1 and p.committed.visible == []  # no transaction after a failed send
    assert p.task.state is TaskState.RUNNING and p.membership.rejoins == 0
    assert p.committer.ahead is replacement and replaced == [broken]
    assert await p.commit(looping_run())
    reference, ahead = await ahead_partition()
    await reference.commit(looping_run())
    assert replacement.sent == ahead.sent


async def test_a_failed_transaction_after_publishing_publishes_the_same_bytes_again():
    messages = looping_run()
    p, ahead = await ahead_partition()
    await p.commit(messages[:5])
    first = list(ahead.sent)
    p.task.producer = FakeProducer(fail_commit=KafkaConnectionError("the broker went away"))
    assert not await p.commit(messages[5:])
    published = ahead.sent[len(first) :]
    assert published and p.restores == 1
    assert await p.commit(messages[5:])
    # The batch read again after the rebuild: the same commands, byte for byte, again.
    assert ahead.sent[len(first) + len(published) :] == published


async def test_records_stamped_by_their_producer_are_never_published_ahead():
    create_time = [
        SourceMessage(m.key, m.value, m.partition, m.offset, m.timestamp, 0) for m in looping_run()
    ]
    p, ahead = await ahead_partition()
    assert await p.commit(create_time)
    assert ahead.sent == [] and len(p.committed.records("commands")) == 6


async def test_a_clock_moved_by_a_receipt_time_holds_later_batches_back_until_it_commits():
    # A CreateTime batch moves the partition clock to this worker's receipt time. Until it
    # commits, a successor would read it again at another time and expire other runs: a later
    # append-time batch published ahead could carry a verdict the successor would not give.
    messages = looping_run()
    create_time = [SourceMessage(m.key, m.value, m.partition, m.offset, m.timestamp, 0) for m in messages[:3]]
    p, ahead = await ahead_partition()
    first = await p.committer.apply(p.task, create_time)
    second = await p.committer.apply(p.task, messages[3:5])
    assert not first.ahead and not second.ahead and ahead.sent == []
    assert isinstance(await p.committer.commit(p.task, [first, second]), Committed)
    third = await p.committer.apply(p.task, messages[5:])
    assert third.ahead and ahead.sent


class SlowAckProducer(FakeAheadProducer):
    """Acknowledges each send `delay_s` after it (in-sync replicas slow to answer)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[None]:
        sent = await super().send(topic, value, key, partition)
        slow: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(self.delay_s, slow.set_result, sent.result())
        return slow


async def test_a_long_wait_for_acks_does_not_age_the_transaction_a_successor_fenced():
    # The transaction begins after the acks: fenced at once, it is young, however long the acks
    # took (the log then names a fencing, not the broker's abort of an old transaction).
    p = await timed_out_partition(timeout_s=0.05)
    p.committer.ahead = SlowAckProducer(delay_s=0.1)
    p.task.producer = FakeProducer(fail_commit=ProducerFenced())
    outcome = await p.committer.commit(p.task, [await p.committer.apply(p.task, looping_run())])
    assert isinstance(outcome, Fenced) and not outcome.past_timeout


class HeldAheadProducer(FakeAheadProducer):
    """Holds the sends of one run's commands until `release` is set (a send waiting on the
    broker: aiokafka's buffer full, or metadata)."""

    def __init__(self, held_key: bytes) -> None:
        super().__init__()
        self.held_key = held_key
        self.release = asyncio.Event()
        self.holding = asyncio.Event()  # a send is held

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[None]:
        if key == self.held_key:
            self.holding.set()
            await self.release.wait()
        return await super().send(topic, value, key, partition)


def append_timed(topic: str, run: bytes, first_offset: int) -> list[ConsumerRecord]:
    values = [m.value.replace(b'"r1"', b'"' + run + b'"') for m in looping_run()]
    return [
        ConsumerRecord(
            topic,
            0,
            first_offset + i,
            1_700_000_000_000,
            LOG_APPEND_TIME,
            run,
            value,
            None,
            len(run),
            len(value),
            [],
        )
        for i, value in enumerate(values)
    ]


async def test_a_batch_whose_sends_outlast_a_rebuild_of_its_partition_is_never_committed():
    gate = asyncio.Event()
    failing = FakeProducer(fail_commit=KafkaConnectionError("the broker went away"), gate=gate)
    fresh = FakeProducer()
    settings = Settings(topic_prefix="t")
    # The first producer, then the fresh one; nothing committed: the changelog is empty.
    fakes = FakePipeline(settings, failing, then=fresh)
    pipeline, consumer, tp = await fakes.assigned(), fakes.consumer, fakes.tp
    ahead = pipeline.committer.ahead = HeldAheadProducer(b"r2")
    first = append_timed(settings.events_topic, b"r1", 0)
    consumer.queued.append({tp: first})
    consumer.queued.append({tp: append_timed(settings.events_topic, b"r2", len(first))})
    loop = asyncio.create_task(pipeline.run())
    try:
        await until(lambda: failing.transactions, 5, "r1's batch in its transaction, held by the gate")
        await asyncio.wait_for(ahead.holding.wait(), 5)  # r2's batch applied, its sends held
        gate.set()  # r1's transaction fails: the partition is rebuilt on the fresh producer
        task = pipeline.tasks.get(0)
        assert task is not None
        await until(lambda: task.epoch >= 2, 5, "the partition rebuilt")
        beat = pipeline.progress.beat  # the loop waits in r2's sends: no beat until they end
        ahead.release.set()
        # Past r2's batch, and any commit it would have started over.
        await until(
            lambda: pipeline.progress.beat > beat and not pipeline.tasks.committing(), 5, "r2's batch handled"
        )
        # r2's batch was applied on r1's discarded states: it must be read again, not committed.
        assert fresh.visible == [], fresh.visible
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


class RefusingAtOnce(FakeAheadProducer):
    """Refuses its `refuse_at`-th send at once (aiokafka's buffer full while the broker is away,
    or no metadata): nothing of it is queued, and the producer stays usable."""

    def __init__(self, refuse_at: int, transactional: FakeProducer | None = None) -> None:
        super().__init__(transactional=transactional)
        self.calls = 0
        self.refuse_at = refuse_at

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[None]:
        self.calls += 1
        if self.calls == self.refuse_at:
            raise KafkaTimeoutError()
        return await super().send(topic, value, key, partition)


async def test_a_batch_after_a_send_refused_at_once_does_not_overtake_the_commands_never_sent():
    messages = looping_run()
    p = await FakePartition().serve()
    ahead = RefusingAtOnce(refuse_at=1, transactional=p.committed)
    p.committer.ahead = ahead
    first = await p.committer.apply(p.task, messages[:-2])  # its first command refused
    second = await p.committer.apply(p.task, messages[-2:])  # applied before the first commits
    assert first.result.commands and second.result.commands
    assert not second.ahead and ahead.sent == []
