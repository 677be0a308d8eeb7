"""Pipelining: per partition, batches applied at once and committed one transaction at a time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from aiokafka import TopicPartition

from streams.worker.commit import Applied
from streams.worker.progress import Progress

# Records applied but not yet committed, per partition, past which it is paused until its
# transaction ends: bounds the memory of pending writes and what a failed transaction makes the
# partition read again.
PENDING_MAX_RECORDS = 4000

Commit = Callable[[TopicPartition, Sequence[Applied]], Awaitable[bool]]


class Pausable(Protocol):
    """What the in-flight batches use of the consumer."""

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...


class InFlight:
    """A partition's batches are applied as they come (`add`); one transaction per partition is
    in flight at a time, and it takes every batch applied meanwhile. A partition's events wait
    for no transaction, only for the apply step (and past PENDING_MAX_RECORDS for the commit).

    A commit that fails rebuilt the partition: everything pending is discarded (it is read again
    from the committed position) and the partition's `epoch` moves, so that records fetched
    before the rebuild are never applied after it. A batch that raised (or was cancelled) leaves
    its partition paused and sets `failure`, which the consume loop raises."""

    def __init__(self, consumer: Pausable, progress: Progress, commit_interval_s: float = 0.0) -> None:
        """`commit_interval_s`: a partition's transactions begin at least this far apart while
        every batch waiting for one had its commands published ahead (no verdict waits for it)."""
        self.consumer = consumer
        self.progress = progress
        self.commit_interval_s = commit_interval_s
        self._began: dict[int, float] = {}  # partition -> when (monotonic) its last commit began
        self.failure: BaseException | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}  # partition -> its commit loop
        self._pending: dict[int, list[Applied]] = {}  # partition -> applied, not yet committing
        self._full: set[int] = set()  # paused for pending records past the bound
        # partition -> rebuilds so far: records fetched under an older epoch are not applied.
        self.epoch: dict[int, int] = {}
        # partition -> the offset after its last applied batch (where to read on from when
        # records fetched under an older epoch are dropped)
        self.next_offset: dict[int, int] = {}
        # Partitions kept paused (rebuilding; dropped, waiting to be rebuilt).
        self.held: set[int] = set()
        self._stopping = False  # set by `drain`: a batch cancelled from then on is abandoned

    def __contains__(self, partition: int) -> bool:
        """Whether the partition is being rebuilt or held: records fetched now are not applied."""
        return partition in self.held

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def add(self, tp: TopicPartition, applied: Applied, commit: Commit,
            observe: Callable[[Applied], None]) -> None:
        """An applied batch, committed by the partition's commit loop (started if idle)."""
        partition = tp.partition
        pending = self._pending.setdefault(partition, [])
        pending.append(applied)
        self.next_offset[partition] = applied.last_offset + 1
        if sum(batch.records for batch in pending) >= PENDING_MAX_RECORDS:
            self.consumer.pause(tp)
            self._full.add(partition)
        running = self._tasks.get(partition)
        # A commit loop that has just found nothing pending and ended, its done callback not yet
        # run, would never take this batch: a new one does.
        if running is None or running.done():
            self.progress.batches_since[partition] = time.monotonic()
            task = asyncio.create_task(self._commit_loop(tp, commit, observe),
                                       name=f"batch-{partition}")
            self._tasks[partition] = task
            task.add_done_callback(lambda done: self._done(tp, done))

    async def _commit_loop(self, tp: TopicPartition, commit: Commit,
                           observe: Callable[[Applied], None]) -> None:
        partition = tp.partition
        while True:
            await self._spaced(partition)
            batches = self._pending.pop(partition, None)
            if not batches:
                break
            self._began[partition] = time.monotonic()
            self.progress.batches_since[partition] = time.monotonic()
            if not await commit(tp, batches):
                # Rebuilt (`rebuilding` discarded what was applied on top of the failed
                # batches), or dropped: what is pending now was applied after the rebuild.
                continue
            for batch in batches:
                observe(batch)
            if partition in self._full and sum(
                    batch.records for batch in self._pending.get(partition, [])) < PENDING_MAX_RECORDS:
                self._full.discard(partition)
                self._resume(tp)
        self._full.discard(partition)
        self._resume(tp)

    async def _spaced(self, partition: int) -> None:
        """Wait out the commit interval since the partition's last transaction began, unless a
        verdict waits for the next one (a batch not published ahead) or the worker stops."""
        pending = self._pending.get(partition)
        if not pending or self._stopping or not all(batch.ahead for batch in pending):
            return
        wait = self._began.get(partition, float("-inf")) + self.commit_interval_s - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    def _resume(self, tp: TopicPartition) -> None:
        if tp in self.consumer.assignment() and tp.partition not in self.held:
            self.consumer.resume(tp)

    def rebuilding(self, tp: TopicPartition) -> None:
        """The partition's transaction failed: what is pending was applied on top of it and is
        discarded; paused, its records not applied, until `rebuilt` (or a new assignment)."""
        partition = tp.partition
        self._pending.pop(partition, None)
        self.next_offset.pop(partition, None)
        self.held.add(partition)
        self.consumer.pause(tp)
        self.epoch[partition] = self.epoch.get(partition, 0) + 1

    def rebuilt(self, tp: TopicPartition, position: int | None) -> None:
        """Rebuilt and sought to `position`: records fetched before are not applied."""
        partition = tp.partition
        self.epoch[partition] = self.epoch.get(partition, 0) + 1
        self._pending.pop(partition, None)
        if position is not None:
            self.next_offset[partition] = position
        self.held.discard(partition)
        self._resume(tp)

    def forget(self, partition: int) -> None:
        """A partition this worker no longer owns (nothing of it is pending: settled first)."""
        self.next_offset.pop(partition, None)
        self.held.discard(partition)
        self._full.discard(partition)

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
            self.consumer.pause(tp)
            return
        exc = task.exception()
        if exc is not None:
            self.failure = self.failure or exc
            self.consumer.pause(tp)

    async def settle(self) -> None:
        """Wait for every partition's pending batches to commit (or fail: the loop then raises)."""
        while self._tasks:
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
