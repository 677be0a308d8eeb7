"""Pausing: at most one batch in flight per partition, as its own task, its partition paused meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from aiokafka import TopicPartition

from streams.worker.progress import Progress


class Pausable(Protocol):
    """What the in-flight batches use of the consumer."""

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...


class InFlight:
    """A partition's events wait only for its own previous transaction, never for another's. A
    batch that failed (or was cancelled) leaves its partition paused and sets `failure`, which the
    consume loop raises."""

    def __init__(self, consumer: Pausable, progress: Progress) -> None:
        self.consumer = consumer
        self.progress = progress
        self.failure: BaseException | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}  # partition -> its batch's task
        # Partitions kept paused after their batch (dropped, waiting to be rebuilt).
        self.held: set[int] = set()
        self._stopping = False  # set by `drain`: a batch cancelled from then on is abandoned

    def __contains__(self, partition: int) -> bool:
        return partition in self._tasks

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def start(self, tp: TopicPartition, batch: Coroutine[Any, Any, None]) -> None:
        self.consumer.pause(tp)
        self.progress.batches_since[tp.partition] = time.monotonic()
        task = asyncio.create_task(batch, name=f"batch-{tp.partition}")
        self._tasks[tp.partition] = task
        task.add_done_callback(lambda done: self._done(tp, done))

    def _done(self, tp: TopicPartition, task: asyncio.Task[None]) -> None:
        if self._tasks.get(tp.partition) is task:
            del self._tasks[tp.partition]
            self.progress.batches_since.pop(tp.partition, None)
        # exception() raises on a cancelled task: ask cancelled() first. Abandoned by a stop, a
        # batch is no failure; cancelled otherwise (a rebalance callback cancelled while it
        # waited for it), its commit may have landed unseen by the store.
        if task.cancelled():
            if not self._stopping:
                self.failure = self.failure or asyncio.CancelledError(
                    f"the batch of partition {tp.partition} was cancelled")
            return
        exc = task.exception()
        if exc is not None:
            self.failure = self.failure or exc
            return
        if tp in self.consumer.assignment() and tp.partition not in self.held:
            self.consumer.resume(tp)

    async def settle(self) -> None:
        """Wait for every batch in flight to commit (or fail: the loop then raises)."""
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def drain(self, timeout_s: float) -> int:
        """For a stop: wait up to `timeout_s` for the batches in flight to commit, then cancel the
        ones still waiting (on a broker that does not answer); returns how many were abandoned.
        Nothing of an abandoned batch is visible: its events are read again by the next owner."""
        self._stopping = True
        tasks = list(self._tasks.values())
        if not tasks:
            return 0
        _, stuck = await asyncio.wait(tasks, timeout=timeout_s)
        for task in stuck:
            task.cancel()
        return len(stuck)
