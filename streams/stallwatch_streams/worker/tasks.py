"""A pipeline's partition tasks: made when the group assigns a partition, closed when it takes it
away (one call), settled before partitions change hands and drained when the worker stops."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from aiokafka import TopicPartition

from stallwatch_streams.worker.attempts import key_of, takeover
from stallwatch_streams.worker.retry import until_done
from stallwatch_streams.worker.task import PartitionTask
from stallwatch_streams.worker.task_context import TaskContext


class PartitionTasks:
    """The tasks by partition number. Their counts are read from other threads (the metrics
    server, the health checks, the watchdog): each such read copies the tasks first."""

    def __init__(self, context: TaskContext) -> None:
        self.context = context
        self._tasks: dict[int, PartitionTask] = {}

    def get(self, partition: int) -> PartitionTask | None:
        return self._tasks.get(partition)

    def __iter__(self) -> Iterator[PartitionTask]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def epochs(self) -> dict[int, int]:
        return {partition: task.epoch for partition, task in self._tasks.items()}

    def committing(self) -> bool:
        """Whether any task has batches in flight."""
        return any(task.commit_loop is not None for task in self)

    def batches_since(self) -> list[float]:
        """When each task's batch in flight (or rebuild) began: the health checks' sign."""
        return [since for since in (task.busy_since for task in self) if since is not None]

    def runs_held(self) -> int:
        return sum(task.runs_held() for task in self)

    def live_runs(self) -> int:
        return sum(task.live_runs() for task in self)

    def fingerprints(self) -> int:
        return sum(task.expiry.fingerprints for task in self)

    def state_bytes(self) -> int:
        return sum(task.state_bytes() for task in self)

    # -- partitions changing hands -----------------------------------------------------------

    def suspend(self) -> None:
        for task in self:
            task.suspend()

    def moved_on(self) -> None:
        for task in self:
            task.moved_on()

    async def assign(self, assigned: list[TopicPartition]) -> list[int]:
        """Serve exactly the assigned partitions: the others' tasks closed, a task made and
        restored for each assigned partition without a producer (new ones, and those dropped
        during the rebalance or after a fencing), every one read on from its
        committed position. Returns the partitions restored. Batches settled first."""
        owned = {tp.partition: tp for tp in assigned}
        for partition in [p for p in self._tasks if p not in owned]:
            await self.lose(partition)
        new = sorted(p for p in owned if (task := self._tasks.get(p)) is None or task.producer is None)
        # Fence first: starting the producer aborts the previous owner's open transaction, so
        # the changelog read next is final and no zombie can write after it.
        for partition in new:
            task = self._tasks.setdefault(partition, PartitionTask(owned[partition], self.context))
            await task.fence()
        if new:
            started = time.monotonic()
            # Tried again while the broker is away (a lost broker's partitions of the changelog
            # answer again once their new leaders are elected), as a task's rebuild does.
            restored = await until_done(lambda: self.context.restore(new, self.context.progress.tick))
            self.context.metrics.recovery_seconds.observe(time.monotonic() - started)
            for partition in new:
                self._tasks[partition].restored(restored[partition])
            await self._begin([self._tasks[partition] for partition in new])
        # Every partition read on from its committed position, kept ones too, at the end of the
        # callback: a fetch that returned meanwhile (from the group's offsets) is read again.
        for tp in assigned:
            self._tasks[tp.partition].assigned_again()
        return new

    async def _begin(self, tasks: list[PartitionTask]) -> None:
        """Each restored task's takeover read from the attempts and written back, acknowledged,
        before it applies anything (stallwatch_streams/worker/attempts.py)."""
        attempts = self.context.attempts
        if attempts is None:
            return
        keys = {task.tp.partition: key_of(task.tp.topic, task.tp.partition) for task in tasks}
        previous = await until_done(lambda: attempts.read(keys.values()))
        begun = {
            task: takeover(previous.get(keys[task.tp.partition]), task.position(-1), attempts.owner)
            for task in tasks
        }

        async def write_all() -> None:
            await asyncio.gather(*(t.rewrite(a) for t, a in begun.items()))

        await until_done(write_all)
        for task, attempt in begun.items():
            task.begin(attempt)

    async def lose(self, partition: int) -> None:
        """A partition the group gave away: its task closed, its lag no longer reported."""
        task = self._tasks.pop(partition)
        await task.close()
        with contextlib.suppress(KeyError):
            self.context.metrics.lag.remove(task.tp.topic, str(partition))

    async def settle(self) -> None:
        """Wait for every task's pending batches to commit (or fail: the loop then raises)."""
        while loops := [loop for task in self if (loop := task.commit_loop) is not None]:
            await asyncio.gather(*loops, return_exceptions=True)

    async def drain(self, timeout_s: float) -> int:
        """For a stop: wait up to `timeout_s` for the batches in flight to commit, then cancel the
        ones still waiting (on a broker that does not answer); returns how many were abandoned.
        Nothing of an abandoned batch is visible: its events are read again by the next owner."""
        self.context.membership.stopping = True
        loops = [loop for task in self if (loop := task.commit_loop) is not None]
        if not loops:
            return 0
        _, stuck = await asyncio.wait(loops, timeout=timeout_s)
        for loop in stuck:
            loop.cancel()
        return len(stuck)

    async def close(self) -> None:
        """The worker stops: every task closed (its producer too)."""
        for partition in list(self._tasks):
            await self._tasks.pop(partition).close()
