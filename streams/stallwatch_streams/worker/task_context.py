"""What the partition tasks of one pipeline share, and what they use of the world around them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition

from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.attempts import AttemptLog
from stallwatch_streams.worker.commit import Applied, BatchCommitter, TransactionalProducer
from stallwatch_streams.worker.membership import Membership
from stallwatch_streams.worker.progress import Progress
from stallwatch_streams.worker.store import PartitionStates


class TaskConsumer(Protocol):
    """What a task uses of the pipeline's consumer (aiokafka's, or a fake in the unit tests)."""

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None: ...

    async def committed(self, partition: TopicPartition) -> int | None: ...


class PipelineConsumer(TaskConsumer, Protocol):
    """What a pipeline uses of its consumer: aiokafka's (the project's subclass), a tenant's view
    of its group's librdkafka consumer (the group model), or a fake in the unit tests."""

    def subscribe(self, topics: list[str], listener: Any) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]: ...

    def highwater(self, partition: TopicPartition) -> int | None: ...

    async def topics(self) -> set[str]: ...

    def request_rejoin(self) -> None: ...

    def set_fetch_max_wait(self, wait_ms: int) -> None: ...


ProducerFactory = Callable[[int], Awaitable[TransactionalProducer]]
# The states of the given partitions read from their changelog (`store.restore`), with a tick
# after every fetch.
Restore = Callable[[list[int], Callable[[], None]], Awaitable[dict[int, PartitionStates]]]


@dataclass
class TaskContext:
    """What the tasks of one pipeline share."""

    settings: Settings
    consumer: TaskConsumer
    committer: BatchCommitter
    membership: Membership
    progress: Progress
    metrics: StallwatchMetrics
    start_producer: ProducerFactory
    restore: Restore
    observe: Callable[[TopicPartition, Applied], None]  # a batch committed: its metrics
    # Where the partitions' owners started and died (None: not kept, nothing applied carefully).
    attempts: AttemptLog | None = None
