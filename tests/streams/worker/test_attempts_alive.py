"""The poison guard's record as a live owner leaves it (no broker): a careful owner's record names
no event once its events are applied, and an owner that loses its partition alive (fenced, or its
transaction failed) makes its record idle before anyone else can take the partition, so that no
successor takes an event it applied for the cause of a death."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import replace

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from stallwatch.engine.detector import Detector
from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.attempts import Attempt, key_of, takeover
from stallwatch_streams.worker.pipeline import Pipeline
from stallwatch_streams.worker.task_state import TaskState
from tests.streams.worker.fake_kafka import FakeConsumer, FakeProducer, consumer_records
from tests.streams.worker.test_commit import looping_run, nothing_committed
from tests.waiting import until

SETTINGS = Settings(topic_prefix="t")
TP = TopicPartition(SETTINGS.events_topic, 0)
KEY = key_of(TP.topic, TP.partition)
RECORDS = len(looping_run())


class AttemptsStandIn:
    """The attempts topic as the last record of each key; every write noted with how many times
    the pipeline had asked its group to rebalance by then."""

    def __init__(self, previous: Attempt | None, refused_idle: int = 0) -> None:
        self.owner = "this"
        self.records = {} if previous is None else {KEY: previous}
        self.written: list[tuple[Attempt, int]] = []
        self.pipeline: Pipeline | None = None
        self.refused_idle = refused_idle  # idle records after a busy one refused, the first so many

    async def read(self, keys: Collection[str]) -> dict[str, Attempt]:
        return {key: self.records[key] for key in keys if key in self.records}

    async def write(self, key: str, attempt: Attempt) -> None:
        assert self.pipeline is not None
        if not attempt.busy and self.records.get(key, Attempt()).busy and self.refused_idle:
            self.refused_idle -= 1
            raise KafkaConnectionError("the broker went away")
        stamped = replace(attempt, owner=self.owner)
        self.records[key] = stamped
        self.written.append((stamped, self.pipeline.membership.rejoins))

    @property
    def last(self) -> Attempt:
        return self.records[KEY]


async def serving(
    previous: Attempt | None, *producers: FakeProducer, refused_idle: int = 0
) -> tuple[Pipeline, AttemptsStandIn]:
    """A pipeline that takes partition 0 over after `previous` (the record a dead owner left) and
    has the looping run to read, its producers started in the order given (then new ones)."""
    attempts = AttemptsStandIn(previous, refused_idle)
    queue = list(producers)

    async def start_producer(partition: int) -> FakeProducer:
        return queue.pop(0) if queue else FakeProducer()

    consumer = FakeConsumer([TP])
    pipeline = Pipeline(
        SETTINGS,
        StallwatchMetrics(),
        Detector(),
        consumer=consumer,  # type: ignore[arg-type]
        start_producer=start_producer,
        restore=nothing_committed,
        attempts=attempts,  # type: ignore[arg-type]
    )
    attempts.pipeline = pipeline
    await pipeline.on_partitions_assigned([TP])
    consumer.queued.append({TP: consumer_records(TP.topic, 0, b"r1", [m.value for m in looping_run()])})
    return pipeline, attempts


def state(pipeline: Pipeline) -> TaskState | None:
    task = pipeline.tasks.get(0)
    return None if task is None else task.state


async def stopped(loop: asyncio.Task[None]) -> None:
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop


DIED_IN_A_BATCH = replace(Attempt().over(0, 100), owner="the dead one")


async def test_a_careful_owner_leaves_its_record_idle_once_its_events_are_applied():
    pipeline, attempts = await serving(DIED_IN_A_BATCH)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 1 + RECORDS + 1, 5, lambda: attempts.written)
    written = [a for a, _ in attempts.written]
    assert [a.applying for a in written[1:-1]] == list(range(RECORDS))  # one at a time
    assert not attempts.last.busy and attempts.last.careful_through == 100
    # A kill now, while its transaction waits: its successor is careful, and finds no poison.
    assert takeover(attempts.last, -1, owner="a successor") == Attempt(careful_through=100)
    await stopped(loop)


async def test_an_owner_leaves_its_record_idle_once_its_batch_is_applied_while_its_transaction_waits():
    gate = asyncio.Event()
    pipeline, attempts = await serving(None, FakeProducer(gate=gate))
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 3, 5, lambda: attempts.written)
    assert [a.batch for a, _ in attempts.written] == [None, (0, RECORDS - 1), None]
    assert pipeline.tasks.committing()  # its transaction still waits
    # A kill now: the batch killed nothing, and its successor applies it as any batch.
    assert takeover(attempts.last, -1, owner="a successor") == Attempt()
    gate.set()
    await stopped(loop)


@pytest.mark.parametrize("previous", [DIED_IN_A_BATCH, None], ids=["careful", "batch"])
async def test_an_owner_fenced_alive_makes_its_record_idle_before_the_group_is_asked(previous):
    pipeline, attempts = await serving(previous, FakeProducer(fail_commit=ProducerFenced()))
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: pipeline.membership.rejoins == 1, 5, "the group asked")
    assert state(pipeline) is TaskState.DROPPED
    assert attempts.written[-1][1] == 0  # written before the group was asked
    assert not attempts.last.busy
    # Whoever the group gives the partition to finds no death and no poison.
    successor = takeover(attempts.last, -1, owner="a successor")
    assert successor.poison == () and successor.careful_through == (100 if previous else None)
    await stopped(loop)


@pytest.mark.parametrize(
    "failure", [ProducerFenced(), KafkaConnectionError("the broker went away")], ids=["fenced", "failed"]
)
async def test_a_record_left_busy_is_made_idle_before_the_partition_can_move(failure):
    """The idle write after the apply was lost: the task that loses its partition alive (fenced,
    or rebuilt after its transaction failed) writes it again, and waits for it."""
    failing = FakeProducer(fail_commit=failure)
    pipeline, attempts = await serving(None, failing, refused_idle=1)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: failing.stopped and attempts.refused_idle == 0, 5, "the task let its producer go")
    await until(lambda: not attempts.last.busy, 5, lambda: attempts.written)
    batch, idle = attempts.written[-2:]
    assert batch[0].batch == (0, RECORDS - 1) and idle == (replace(batch[0].idle), 0)  # group not asked yet
    await stopped(loop)


async def test_a_held_task_writes_no_record_and_a_write_under_way_is_given_up():
    pipeline, attempts = await serving(None)
    task = pipeline.tasks.get(0)
    assert task is not None
    refusals = [KafkaConnectionError("the broker went away")]

    async def write(key: str, attempt: Attempt) -> None:
        if refusals:
            task.lifecycle.to(TaskState.REBUILDING)  # dropped while the write waited
            raise refusals.pop()
        raise AssertionError("written after the task was held")

    attempts.write = write  # type: ignore[method-assign]
    assert not await task.record(Attempt().over(0, 5))
    assert not await task.record(Attempt().over(0, 5))  # held: not tried at all
    assert task.attempt == Attempt()  # what its takeover wrote
