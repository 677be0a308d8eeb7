"""One assigned partition as a task: its transactional producer, its run states (with their clock
and position), its batches applied but not yet committed and the loop that commits them, its
expiry scan and its commit ledger (failures in a row among them), moved through the lifecycle of
streams/stallwatch_streams/worker/task_state.py.

Pipelining: a partition's batches are applied as they are fetched (`add`); one transaction per
partition is in flight at a time, and it takes every batch applied meanwhile. A partition's
events wait for no transaction, only for the apply step (and past PENDING_MAX_RECORDS for the
commit). A transaction that fails discards everything applied since the last commit (it is read
again from the committed position) and moves the task's `epoch`, so that records fetched before
the rebuild are never applied after it; a rebalance moves it too. The epoch alone decides what
the task takes (`admission`, `takes`). A commit loop that raised (or was cancelled) leaves its
partition paused and is the pipeline's failure, which its consume loop raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from aiokafka import TopicPartition

from stallwatch_streams.worker import producers
from stallwatch_streams.worker.attempts import AHEAD_RECORDS, AHEAD_UNCOMMITTED_MAX, Attempt, key_of
from stallwatch_streams.worker.batch import SourceRecord
from stallwatch_streams.worker.commit import (
    Applied,
    CommitLedger,
    Committed,
    Failed,
    Fenced,
    TransactionalProducer,
)
from stallwatch_streams.worker.expiry import ExpiryScan
from stallwatch_streams.worker.retry import Abandoned, until_done
from stallwatch_streams.worker.store import PartitionStates
from stallwatch_streams.worker.task_context import TaskContext
from stallwatch_streams.worker.task_state import SERVING, Lifecycle, TaskState

log = logging.getLogger(__name__)

# Records applied but not yet committed, per partition, past which it is paused until its
# transaction ends: bounds the memory of pending writes and what a failed transaction makes the
# partition read again.
PENDING_MAX_RECORDS = 4000
# How long a task that loses its partition alive waits for its attempts record to be made idle.
RELEASE_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class ReadFrom:
    """Records fetched before the partition last changed (a rebalance, a rebuild): not applied;
    the partition is read on from `offset`."""

    offset: int


# What the consume loop does with records fetched for a task: apply them, leave them (the task is
# held: its rebuild seeks it), or seek.
Admission = Literal["apply", "held"] | ReadFrom


class PartitionTask:
    """One partition this worker was assigned, from its assignment to its loss."""

    def __init__(self, tp: TopicPartition, context: TaskContext) -> None:
        self.tp = tp
        self.context = context
        self.lifecycle = Lifecycle(tp.partition)
        self.producer: TransactionalProducer | None = None
        self._states: PartitionStates | None = None
        settings = context.settings
        self.expiry = ExpiryScan(
            tp.partition, settings.idle_timeout_s, settings.ended_retention_s, settings.expiry_interval_s
        )
        self.ledger = CommitLedger()
        # Moved at every change of what it stands on (a rebuild, a rebalance): records fetched
        # under an older epoch are not applied. The one judge of staleness.
        self.epoch = 0
        # The offset after its last applied batch (where to read on from when records fetched
        # under an older epoch are dropped); None once discarded.
        self.next_offset: int | None = None
        # When (monotonic) its batch in flight, or its rebuild, began: a sign of progress.
        self.busy_since: float | None = None
        self._pending: list[Applied] = []  # applied, not yet committing
        self._full = False  # paused for pending records past the bound
        self._began = float("-inf")  # when (monotonic) its last transaction began
        self._loop: asyncio.Task[None] | None = None  # its commit loop
        # What it is applying, as written to the attempts before it applies it (None: not kept).
        self.attempt: Attempt | None = None
        self._recording = asyncio.Lock()  # its record's writes: one at a time, in call order
        # Its last record was posted (`post_idle`, `post_ahead`), its acknowledgement not awaited yet.
        self._posted = False
        # The acknowledgement of its record posted ahead (`post_ahead`), while that is its last.
        self._ahead: asyncio.Future[Any] | None = None

    def __repr__(self) -> str:
        return f"PartitionTask({self.tp.topic}-{self.tp.partition}, {self.state.name})"

    # -- what it is now ----------------------------------------------------------------------

    @property
    def state(self) -> TaskState:
        return self.lifecycle.state

    @property
    def states(self) -> PartitionStates:
        if self._states is None:
            raise LookupError(f"partition {self.tp.partition} holds no states ({self.state.name})")
        return self._states

    @property
    def has_states(self) -> bool:
        return self._states is not None

    @property
    def held(self) -> bool:
        """Being rebuilt, or dropped: records fetched now are not applied, and it stays paused."""
        return self.state not in SERVING

    @property
    def commit_loop(self) -> asyncio.Task[None] | None:
        """Its batches in flight, committing (None: nothing applied waits for a transaction)."""
        return self._loop

    @property
    def poison(self) -> tuple[int, ...]:
        """Offsets of events that killed the worker applying them, not yet committed."""
        return () if self.attempt is None else self.attempt.poison

    def position(self, otherwise: int) -> int:
        """Its committed position, else `otherwise`."""
        position = self._states.position if self._states is not None else None
        return otherwise if position is None else position

    def runs_held(self) -> int:
        return len(self._states) if self._states is not None else 0

    def state_bytes(self) -> int:
        """The estimated bytes of its live runs' states (0 when no quota keeps the ledger)."""
        live = self._states.live if self._states is not None else None
        return sum(live.bytes_by_tenant.values()) if live is not None else 0

    def live_runs(self) -> int:
        """Its runs not ended (ended ones are kept a while, for redeliveries): its live ledger's
        count, else every run held."""
        if self._states is not None and self._states.live is not None:
            return self._states.live.total
        return self.runs_held()

    # -- assignment --------------------------------------------------------------------------

    async def fence(self) -> None:
        """Start its producer: that aborts the previous owner's open transaction and refuses its
        later writes, so the changelog read next is final and no zombie can write after it."""
        self.lifecycle.to(TaskState.RESTORING)
        # Tried again while the broker is away: a broker lost during a rebalance must not end the
        # worker that the group is handing partitions to.
        self.producer = await until_done(lambda: self.context.start_producer(self.tp.partition))

    def restored(self, states: PartitionStates) -> None:
        """Serve from the states read from its changelog."""
        self._states = states
        self.expiry.fingerprints = states.restored_fingerprints
        self.lifecycle.to(TaskState.SUSPENDED if self.context.membership.revoking else TaskState.RUNNING)

    def begin(self, attempt: Attempt) -> None:
        """Its takeover, as found in the attempts: careful over the batch a dead owner had in hand."""
        self.attempt = attempt
        if attempt.careful_through is not None:
            log.warning(
                "partition %d of %s: the previous owner died applying records up to offset %d; "
                "applying them one at a time%s",
                self.tp.partition,
                self.tp.topic,
                attempt.careful_through,
                f", the events at {list(attempt.poison)} that killed it dead-lettered"
                if attempt.poison
                else "",
            )

    def suspend(self) -> None:
        """A rebalance began: its batches in flight still commit, and it is kept (producer and
        states) for the assignment that follows, which most often gives it back."""
        if self.state is TaskState.RUNNING:
            self.lifecycle.to(TaskState.SUSPENDED)

    def moved_on(self) -> None:
        """Its partition changed hands (a revocation or an assignment, under the pipeline's lock,
        so no batch is being applied): records fetched before may come from the group's offset,
        which may lag, and are read again from its committed position (every batch applied
        before the rebalance has committed by now)."""
        self.epoch += 1
        self.next_offset = self._states.position if self._states is not None else None

    def assigned_again(self) -> None:
        """Kept, or restored, in an assignment: read on from its committed position, since the
        consumer put it at the group's offset, which may lag (group_offsets_interval_s). No I/O:
        a slow assignment callback misses the group's rebalance and is thrown out of the group.
        With no position yet it starts where the consumer put it (the group's offset, else the
        beginning), as a partition did before positions were written. And unpaused, as aiokafka's
        eager assignment leaves every partition: a cooperative one (the group model) hands a kept
        partition nothing, so a task dropped and restored meanwhile would stay paused."""
        if self.state is TaskState.SUSPENDED:
            self.lifecycle.to(TaskState.RUNNING)
        self.moved_on()
        if self._states is not None and self._states.position is not None:
            self.context.consumer.seek(self.tp, self._states.position)
        self._resume()

    async def close(self) -> None:
        """Given away, or the worker stops: its producer closed, its states let go. Nothing of
        it is pending: the rebalance settled its batches first (or a stop abandoned them)."""
        self.lifecycle.to(TaskState.CLOSED)
        await self._close_producer()
        self._states = None

    # -- batches -----------------------------------------------------------------------------

    def admission(self, first_offset: int, epoch: int | None) -> Admission:
        """What to do with records fetched for it under `epoch` (None: before it existed)."""
        if self.held:
            return "held"  # its rebuild seeks it to the committed position
        if self.epoch != epoch:
            # Fetched before its rebuild or a rebalance: read on from where it stands now.
            return ReadFrom(self.position(first_offset) if self.next_offset is None else self.next_offset)
        return "apply"

    def takes(self, epoch: int | None) -> bool:
        """Whether a batch applied under `epoch` is still to be committed: not if the task was
        rebuilt or dropped while the batch sent its commands (a commit of its earlier batches
        failed meanwhile). The batch was applied on states the rebuild discarded; its records
        are read again from where the rebuild seeks the partition, after this batch was fetched
        (a dropped partition is sought when it is rebuilt); its commands, sent already, are the
        same bytes."""
        return self.epoch == epoch and not self.held and self._states is not None

    async def apply(self, records: Sequence[SourceRecord], epoch: int | None) -> None:
        """Records fetched under `epoch` applied to its states and handed to its commit loop.
        Those its previous owner died applying are applied one at a time, each one's offset
        written to the attempts first; the rest at once, their first and last offsets written
        first unless the pipeline's mark did (stallwatch_streams/worker/attempts.py). Nothing is
        written once it no longer takes the records: the partition may be another's."""
        attempts, attempt = self.context.attempts, self.attempt
        if attempts is None or attempt is None or not attempt.careful(records[0].offset):
            await self._apply_batch(records, epoch)
            return
        for index, record in enumerate(records):
            if not self.takes(epoch):
                return
            if not attempt.careful(record.offset):
                rest = records[index:]
                if await self.record(attempt.over(rest[0].offset, rest[-1].offset)):
                    await self._apply_batch(rest, epoch)
                return
            if not await self.record(attempt.at(record.offset)):
                return
            if not await self._apply_batch([record], epoch):
                return
            self.context.progress.tick()  # a round trip a record: progress, not a hang

    async def _apply_batch(self, records: Sequence[SourceRecord], epoch: int | None) -> bool:
        """False when it no longer takes what was fetched under `epoch` (rebuilt or dropped
        before or during the apply)."""
        if not self.takes(epoch):
            return False
        applied = await self.context.committer.apply(self, records, partial(self.takes, epoch), self.poison)
        if applied is None or not self.takes(epoch):
            return False
        self.add(applied)
        return True

    def add(self, applied: Applied) -> None:
        """An applied batch, committed by the task's commit loop (started if idle)."""
        self.lifecycle.require(*SERVING)
        pending = self._pending
        pending.append(applied)
        self.next_offset = applied.last_offset + 1
        if sum(batch.records for batch in pending) >= PENDING_MAX_RECORDS:
            self.context.consumer.pause(self.tp)
            self._full = True
        running = self._loop
        # A commit loop that has just found nothing pending and ended, its done callback not yet
        # run, would never take this batch: a new one does.
        if running is None or running.done():
            self.busy_since = time.monotonic()
            loop = asyncio.create_task(self._commit_loop(), name=f"batch-{self.tp.partition}")
            self._loop = loop
            loop.add_done_callback(self._loop_done)

    async def _commit_loop(self) -> None:
        committer, observe = self.context.committer, self.context.observe
        while True:
            await self._spaced()
            batches, self._pending = self._pending, []
            if not batches:
                break
            self._began = self.busy_since = time.monotonic()
            outcome = await committer.commit(self, batches)
            if not isinstance(outcome, Committed):
                # Rebuilt (what was applied on top of the failed batches is discarded), or
                # dropped: what is pending now was applied after the rebuild.
                await self._recover(outcome)
                continue
            for batch in batches:
                observe(self.tp, batch)
            if self._full and sum(batch.records for batch in self._pending) < PENDING_MAX_RECORDS:
                self._full = False
                self._resume()
        self._full = False
        self._resume()

    async def _spaced(self) -> None:
        """Wait out the commit interval since its last transaction began, unless a verdict waits
        for the next one (a batch not published ahead) or the worker stops."""
        pending = self._pending
        if not pending or self.context.membership.stopping or not all(b.ahead for b in pending):
            return
        wait = self._began + self.context.settings.commit_interval_s - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    def _resume(self) -> None:
        if self.tp in self.context.consumer.assignment() and not self.held:
            self.context.consumer.resume(self.tp)

    def _loop_done(self, loop: asyncio.Task[None]) -> None:
        if self._loop is loop:
            self._loop = None
            self.busy_since = None
        membership = self.context.membership
        # exception() raises on a cancelled task: ask cancelled() first. Abandoned by a stop, a
        # batch is no failure; cancelled otherwise (a rebalance callback cancelled while it
        # waited for it), its commit may have landed unseen by its states.
        if loop.cancelled():
            if not membership.stopping:
                membership.batch_failed(
                    asyncio.CancelledError(f"the batch of partition {self.tp.partition} was cancelled")
                )
            self.context.consumer.pause(self.tp)
            return
        exc = loop.exception()
        if exc is not None:
            membership.batch_failed(exc)
            self.context.consumer.pause(self.tp)

    # -- failures ----------------------------------------------------------------------------

    async def _recover(self, outcome: Failed | Fenced) -> None:
        """What follows a commit that failed (nothing of it is visible): a failure that keeps
        coming back ends the worker (raised: the pipeline's failure); another failure (the broker
        went away, a leader moved) rebuilds the task, whose batches are read again; a fencing
        gives the partition back to the group."""
        match outcome:
            case Failed(error=error) if outcome.final:
                raise error
            case Failed(error=error, attempt=attempt):
                log.warning(
                    "partition %d: the batch's transaction failed (%r), attempt %d; "
                    "rebuilding the partition from what Kafka committed",
                    self.tp.partition,
                    error,
                    attempt,
                )
                self.context.metrics.batch_retries.inc()
                await self._rebuild()
            case Fenced():
                await self._fenced(outcome)

    async def _fenced(self, outcome: Fenced) -> None:
        """The producer was fenced: by a successor the group gave the partition to, by the
        broker's abort of a transaction past the transaction timeout (the broker, or the link to
        it, stalled), or by a transaction coordinator that moved with a lost broker. Only the
        group can tell whether a successor holds the partition, and a rebuild now (a new producer
        under the same id) would fence that successor. So, as Kafka Streams does with a
        `TaskMigratedException`, the task is dropped (its producer, its states; it stays paused)
        and the group is asked to rebalance: the assignment that follows rebuilds it if it is
        still this worker's, or forgets it. No batch of it is lost: what was not committed is
        read again by whoever holds the partition."""
        if outcome.past_timeout:
            log.warning(
                "partition %d: its transaction outlived the transaction timeout (%.0f s) "
                "and was fenced; asking the group whose the partition is",
                self.tp.partition,
                self.context.committer.transaction_timeout_s,
            )
        else:
            log.warning(
                "partition %d: its producer was fenced (%r); asking the group whose the partition is",
                self.tp.partition,
                outcome.error,
            )
        self.context.metrics.batch_retries.inc()
        self._discard()
        await self._release()
        await self._close_producer()
        self._drop()
        self.context.membership.ask_the_group()

    async def _rebuild(self) -> None:
        """A new producer under the partition's transactional id (aborting our own open
        transaction), its states and its position as last committed. During a rebalance the task
        is dropped instead, and the assignment that follows restores it or lets it go: a new
        producer started now could fence the member the group gave it to meanwhile (a three-node
        cluster showed both workers fenced at their first rebalance)."""
        self._discard()
        await self._release()
        await self._close_producer()
        if self.context.membership.revoking:
            log.info(
                "partition %d: its transaction failed during a rebalance; the assignment "
                "that follows restores it or gives it away",
                self.tp.partition,
            )
            self._drop()
            return
        await self._restore_alone()

    def _discard(self) -> None:
        """What was applied since the last commit goes (it was applied on top of the failed
        batches); paused, its records not applied, until rebuilt (or a new assignment)."""
        self.lifecycle.to(TaskState.REBUILDING)
        self._pending = []
        self.next_offset = None
        self.ledger.discarded()
        self.context.consumer.pause(self.tp)
        self.epoch += 1

    async def record(self, attempt: Attempt) -> bool:
        """Its attempts record written and acknowledged, before it applies what the record names
        (stallwatch_streams/worker/attempts.py). Not once it is held (rebuilt or dropped: the
        partition may be another's by now): False, nothing written, a write under way given up
        before it is tried again; False too when it was let go while the write was under way
        (`_release` then makes the record idle: it waits for this write)."""
        if self.context.attempts is None:
            return True
        async with self._recording:
            if self.held:
                return False
            try:
                await until_done(partial(self._write, attempt), unless=lambda: self.held)
            except Abandoned:
                return False
            return not self.held

    def landed_ahead(self, first: int, last: int) -> bool:
        """Whether its record posted ahead names `first` to `last` and is acknowledged: `mark`
        has nothing to write or wait for (most batches, once the next ones are named)."""
        attempt, ahead = self.attempt, self._ahead
        return (
            attempt is not None
            and ahead is not None
            and ahead.done()
            and not ahead.cancelled()
            and ahead.exception() is None
            and attempt.covers(first, last)
        )

    async def mark(self, first: int, last: int) -> bool:
        """Its record names `first` to `last`, acknowledged, before they are applied: the record
        it posted ahead when that names them all and landed, else one written now (`record`)."""
        attempt, ahead = self.attempt, self._ahead
        assert attempt is not None  # the guard is kept and the task has begun
        if ahead is not None and attempt.covers(first, last):
            try:
                await asyncio.shield(ahead)
            except Exception:  # not acknowledged: written now, through a producer that works
                log.debug("partition %d: its record posted ahead was not acknowledged", self.tp.partition)
            else:
                return not self.held
        return await self.record(attempt.over(first, last))

    def post_ahead(self) -> bool:
        """Its record made to name the next offsets once what it named is applied (AHEAD_RECORDS
        of them, posted with no wait, where the attempts log can), unless it names enough of them
        already: True when nothing is left to write. False while it is careful (its careful
        events' records go idle), a write of its own is under way, or more than
        AHEAD_UNCOMMITTED_MAX of its events wait for their commit: the caller makes it idle."""
        attempt, attempts, offset = self.attempt, self.context.attempts, self.next_offset
        if attempts is None or attempt is None or offset is None or self.held:
            return False
        if attempt.applying is not None or attempt.careful(offset) or self._recording.locked():
            return False
        # Commits held back: a death would leave a long careful pass. A position not known yet
        # (nothing committed since positions were written) counts as this one.
        if offset - self.position(offset) > AHEAD_UNCOMMITTED_MAX:
            return False
        if self._ahead is not None and attempt.covers(offset, offset + AHEAD_RECORDS // 2 - 1):
            return True
        ahead = attempt.ahead_of(offset)
        acked = attempts.post_ahead(key_of(self.tp.topic, self.tp.partition), ahead)
        if acked is None:
            return False
        acked.add_done_callback(_retrieved)
        self.attempt, self._posted, self._ahead = ahead, True, acked
        return True

    async def applied(self) -> None:
        """What its record names is applied: the record made idle, so that a death while the
        batch's transaction waits is none of the batch's."""
        attempt = self.attempt
        if attempt is not None and attempt.busy:
            await self.record(attempt.idle)

    def post_idle(self) -> bool:
        """Its record made idle without waiting for the acknowledgement (`AttemptLog.post`), when
        no write of its own is under way and the log can: True when nothing is left to write."""
        attempt, attempts = self.attempt, self.context.attempts
        if attempts is None or attempt is None or not attempt.busy:
            return True
        if self._recording.locked() or self.held:
            return False
        if not attempts.post(key_of(self.tp.topic, self.tp.partition), attempt.idle):
            return False
        self.attempt, self._posted, self._ahead = attempt.idle, True, None
        return True

    async def rewrite(self, attempt: Attempt) -> None:
        """Its record written whatever its state (a takeover's first), after any write under way."""
        async with self._recording:
            await self._write(attempt)

    async def _write(self, attempt: Attempt) -> None:
        attempts = self.context.attempts
        assert attempts is not None  # callers write only where the guard is kept
        await attempts.write(key_of(self.tp.topic, self.tp.partition), attempt)
        # Landed after any record posted before it.
        self.attempt, self._posted, self._ahead = attempt, False, None

    async def _release(self) -> None:
        """Alive, it may lose the partition now: its attempts record made idle first, so that a
        successor takes nothing it had in hand for a death (stallwatch_streams/worker/attempts.py).
        After the write under way, if any, and before the group is asked; one the broker holds
        past RELEASE_WAIT_S goes on (shielded, never cancelled halfway) while the partition moves
        on, until the worker stops: its attempts log stops with it."""
        if self.context.attempts is None:
            return
        membership = self.context.membership

        def stopping() -> bool:
            return membership.stopping

        async def idle() -> None:
            async with self._recording:
                attempt = self.attempt
                # A posted idle record is written again and awaited: the same producer lands it
                # after the posted one, so both are in before the group is asked.
                if attempt is not None and (attempt.busy or self._posted):
                    with contextlib.suppress(Abandoned):
                        await until_done(partial(self._write, attempt.idle), unless=stopping)

        releasing = asyncio.ensure_future(idle())
        releasing.add_done_callback(_retrieved)
        try:
            await asyncio.wait_for(asyncio.shield(releasing), RELEASE_WAIT_S)
        except TimeoutError:
            log.warning(
                "partition %d: its attempts record could not be made idle within %.0f s; a "
                "successor may take what it names for a worker's death",
                self.tp.partition,
                RELEASE_WAIT_S,
            )

    def _drop(self) -> None:
        self._states = None
        self.lifecycle.to(TaskState.DROPPED)

    async def _restore_alone(self) -> None:
        """Its producer started again, its states and position read again, and served from there."""
        partition, context = self.tp.partition, self.context
        self.lifecycle.to(TaskState.RESTORING)
        self.producer = await until_done(lambda: context.start_producer(partition))
        restored = await until_done(lambda: context.restore([partition], context.progress.tick))
        self._states = restored[partition]
        position = await self._seek_to_position()
        # Rebuilt and sought: records fetched before are not applied.
        self.epoch += 1
        self._pending = []
        if position is not None:
            self.next_offset = position
        self.restored(self._states)
        self._resume()

    async def _seek_to_position(self) -> int | None:
        """The position its changelog holds, which the same commits as its states wrote; else (no
        batch committed since positions were written) the group's offset, else the beginning
        (None: the offset is not known here)."""
        consumer = self.context.consumer
        position = self.states.position
        if position is None:
            position = await until_done(lambda: consumer.committed(self.tp))
        if position is None:
            await consumer.seek_to_beginning(self.tp)
        else:
            consumer.seek(self.tp, position)
        return position

    async def _close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await producers.stop_quietly(producer)


def _retrieved(done: asyncio.Future[None]) -> None:
    """A write nobody awaits any more: its failure seen, and logged."""
    if not done.cancelled() and done.exception() is not None:
        log.warning("an attempts record was not written: %r", done.exception())
