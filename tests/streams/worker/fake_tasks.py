"""Partition tasks over the fakes of fake_kafka.py, for the unit tests of a task's lifecycle and
commits: what Kafka committed is one fake producer that the task's producers share, and a
rebuild restores the task's states from what that producer's transactions committed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from aiokafka import TopicPartition

from stallwatch.engine.detector import Detector
from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.batch import BatchApplier, SourceRecord
from stallwatch_streams.worker.commit import Applied, BatchCommitter, CommitTopics
from stallwatch_streams.worker.membership import Membership
from stallwatch_streams.worker.pipeline import Pipeline
from stallwatch_streams.worker.progress import Progress
from stallwatch_streams.worker.store import POSITION_KEY, PartitionStates, decode_position
from stallwatch_streams.worker.task import PartitionTask
from stallwatch_streams.worker.task_context import Restore, TaskContext
from tests.streams.worker.fake_kafka import FakeConsumer, FakeProducer

TOPICS = CommitTopics("commands", "deadletter", "changelog", "tallies")
SOURCE = TopicPartition("events", 0)


def committed_changelog(producer: FakeProducer) -> tuple[dict[str, bytes], int | None, float | None]:
    """The states, the position and the clock a restore reads from what the fake committed."""
    states: dict[str, bytes] = {}
    position = clock = None
    for key, value in producer.records("changelog"):
        if key == POSITION_KEY:
            position, clock = decode_position(value)
        elif value is None:
            states.pop(key.decode(), None)
        else:
            states[key.decode()] = value
    return states, position, clock


class FakePartition:
    """Partition 0 of `events` as a real PartitionTask whose producers, consumer and changelog are
    fakes. `committed` is what Kafka holds: every producer started is it, unless `producer` is
    set (a producer that fails, say). `started` and `restores` count the task's producers
    started and its changelog reads (a rebuild does both)."""

    def __init__(
        self,
        applier: BatchApplier | None = None,
        settings: Settings | None = None,
        observe: Callable[[TopicPartition, Applied], None] | None = None,
    ) -> None:
        self.committed = FakeProducer()
        self.producer: FakeProducer | None = None
        self.started = self.restores = 0
        self.consumer = FakeConsumer([SOURCE])
        self.committer = BatchCommitter(applier or BatchApplier(Detector(), SOURCE.topic), TOPICS, "group")
        self.membership = Membership()
        self.metrics = StallwatchMetrics()
        self.context = TaskContext(
            settings or Settings(commit_interval_s=0.0),
            self.consumer,
            self.committer,
            self.membership,
            Progress(),
            self.metrics,
            self._start_producer,
            self._restore,
            observe or self._observe,
        )
        self.task = PartitionTask(SOURCE, self.context)
        self.observed: list[Applied] = []  # the batches committed, in order

    async def serve(self) -> FakePartition:
        """Assigned: fenced and restored from what was committed, then running."""
        await self.task.fence()
        self.task.restored((await self._restore([0], lambda: None))[0])
        self.started = self.restores = 0
        return self

    async def commit(self, records: Sequence[SourceRecord]) -> bool:
        """One batch through the task as the consume loop gives it: applied, added, its commit
        loop run to its end. True if it committed; the loop's failure, if any, is raised."""
        applied = await self.committer.apply(self.task, records)
        committed = len(self.observed)
        self.task.add(applied)
        while (loop := self.task.commit_loop) is not None:
            await asyncio.gather(loop, return_exceptions=True)
        failure, self.membership.batch_failure = self.membership.batch_failure, None
        if failure is not None:
            raise failure
        return len(self.observed) > committed

    def _observe(self, tp: TopicPartition, batch: Applied) -> None:
        self.observed.append(batch)

    async def _start_producer(self, partition: int) -> FakeProducer:
        self.started += 1
        return self.producer or self.committed

    async def _restore(self, partitions: list[int], tick: Callable[[], None]) -> dict[int, PartitionStates]:
        self.restores += 1
        return {p: PartitionStates(*committed_changelog(self.committed)) for p in partitions}

    @property
    def retries(self) -> float:
        return self.metrics.registry.get_sample_value("stallwatch_batch_retries_total") or 0.0


async def nothing_committed(partitions: list[int], tick: object) -> dict[int, PartitionStates]:
    """A restore that finds an empty changelog."""
    return {partition: PartitionStates() for partition in partitions}


class FakePipeline:
    """A real `Pipeline` over fakes, serving partition 0 of `settings`' events topic once
    `assigned()`: its producers started in the order given, then `then` for every later start (a
    new one each time if None); `started` counts the producers started after the assignment, and
    `consumer.queued` takes the fetches to give it."""

    def __init__(
        self,
        settings: Settings,
        *producers: FakeProducer,
        restore: Restore = nothing_committed,
        attempts: object | None = None,
        then: FakeProducer | None = None,
    ) -> None:
        self.tp = TopicPartition(settings.events_topic, 0)
        self.consumer = FakeConsumer([self.tp])
        self.started: list[int] = []
        self._queue = list(producers)
        self._then = then
        self.pipeline = Pipeline(
            settings,
            StallwatchMetrics(),
            Detector(),
            consumer=self.consumer,  # type: ignore[arg-type]
            start_producer=self._start_producer,
            restore=restore,
            attempts=attempts,  # type: ignore[arg-type]
        )

    async def assigned(self) -> Pipeline:
        await self.pipeline.on_partitions_assigned([self.tp])
        self.started.clear()
        return self.pipeline

    async def _start_producer(self, partition: int) -> FakeProducer:
        self.started.append(partition)
        if self._queue:
            return self._queue.pop(0)
        return self._then or FakeProducer()
