"""A partition batch's commit: a pure plan of everything it writes, and one transaction that writes it.

What is true, and why a batch is exact: a batch is applied in memory as soon as it is fetched,
its commands published at once by the worker's idempotent producer (ahead of the transaction,
`publish_ahead`; final for readers, since whoever reads the batch again computes the same bytes:
docs/exactly-once.md). Its other writes (dead letters, changelog records,
tallies) and the input offset after it (the partition's position, with the partition clock, a
record of its changelog) go to Kafka in ONE transaction of the partition's own producer, alone or
with the partition's next batches applied meanwhile (streams/stallwatch_streams/worker/task.py), once every
command of them is acknowledged; read-committed readers see all of it or none of it, and a
restore reads states and position from the same commits. The consumer group's offsets ride along
at most every `group_offsets_interval_s`, for lag tools only. The partition's states take a
batch's runs as it is applied (the next batch reads them), so the worker's memory runs ahead of
Kafka until the commit; if a send or the transaction fails, the commit says so (`Failed`) and
the partition's task is rebuilt (a new producer, its states and position restored from the
changelog), everything applied since its last commit is discarded and read again
(streams/stallwatch_streams/worker/task.py). A fenced producer (`Fenced`) gives the partition back
to the group, which says whose it is; a partition that keeps failing ends the worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from aiokafka import TopicPartition
from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced

from stallwatch.contract.commands import Command, encode_command
from stallwatch.engine.state import RunState
from stallwatch.kafka.aiokafka_patch import retrieve_transaction_failures
from stallwatch.settings import Settings
from stallwatch_streams.worker.batch import LOG_APPEND_TIME, BatchApplier, BatchResult, SourceRecord
from stallwatch_streams.worker.expiry import ExpiryScan
from stallwatch_streams.worker.slicing import apply_in_slices, holds_a_large_event
from stallwatch_streams.worker.store import POSITION_KEY, PartitionStates, encode_position

log = logging.getLogger(__name__)

# A partition whose batch failed this many times in a row (each time rebuilt from Kafka and read
# again) ends the worker: a failure that repeats is not the broker coming back.
MAX_BATCH_FAILURES = 5


@dataclass(frozen=True, slots=True)
class Write:
    """One record of a plan, written to the source partition's number on its topic (every topic
    has the same partition count, so a run's records share its number)."""

    topic: str
    key: bytes | None
    value: bytes | None  # None is a tombstone


@dataclass(frozen=True, slots=True)
class CommitTopics:
    commands: str
    deadletter: str
    changelog: str
    tallies: str

    @classmethod
    def of(cls, settings: Settings) -> CommitTopics:
        return cls(
            settings.commands_topic,
            settings.deadletter_topic,
            settings.changelog_topic,
            settings.tallies_topic,
        )

    def all(self) -> list[str]:
        return [self.commands, self.deadletter, self.changelog, self.tallies]


@dataclass(frozen=True)
class CommitPlan:
    """Everything one partition batch writes, in the order written, and the offset it commits."""

    source: TopicPartition
    writes: list[Write]
    next_offset: int  # the input offset the partition's next batch starts at
    # Every run the batch touched, and the runs whose tombstones it writes (the store took and
    # dropped them when the batch was applied; nothing reads these two once the plan is made).
    states: dict[str, RunState]
    expired: list[str]
    group_offsets: bool = True  # the consumer group's offsets committed too (for lag tools)


def plan_commit(
    topics: CommitTopics,
    source: TopicPartition,
    result: BatchResult,
    expired: Sequence[str],
    next_offset: int,
    group_offsets: bool = True,
    clock: float | None = None,
    commands_ahead: bool = False,
) -> CommitPlan:
    """Pure: the writes of a batch's result (commands unless they were published ahead, dead
    letters, changed states, tombstones of expired runs, the fleet app's tallies) and the
    position after the batch, with the partition clock there."""
    writes = (
        []
        if commands_ahead
        else [Write(topics.commands, c.run_id.encode(), encode_command(c)) for c in result.commands]
    )
    writes += [Write(topics.deadletter, key, letter) for key, letter, _ in result.letters]
    writes += [
        Write(topics.changelog, run_id.encode(), state.to_bytes()) for run_id, state in result.states.items()
    ]
    writes += [Write(topics.changelog, run_id.encode(), None) for run_id in expired]
    writes += [Write(topics.tallies, key, value) for key, value in result.tallies]
    writes.append(Write(topics.changelog, POSITION_KEY, encode_position(next_offset, clock)))
    return CommitPlan(source, writes, next_offset, result.states, list(expired), group_offsets)


class TransactionalProducer(Protocol):
    """What a commit uses of aiokafka's transactional producer (a fake one in the unit tests)."""

    def transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> Awaitable[Any]: ...

    async def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, int], group_id: str
    ) -> None: ...

    async def stop(self) -> None: ...


class TransactionWriter(Protocol):
    """A transactional producer that takes each record into its open transaction at once, all of
    them acknowledged by the commit (the group model's task producer): written with no future a
    record."""

    def write(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None: ...


class AheadProducer(Protocol):
    """What publishing ahead uses of aiokafka's idempotent producer (a fake in the unit tests)."""

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> Awaitable[Any]: ...

    async def stop(self) -> None: ...


def all_append_timed(records: Sequence[SourceRecord]) -> bool:
    """Whether every record carries the broker's append time: only then is the partition clock,
    and so expiry, a function of the log (a CreateTime record moves it to the worker's clock)."""
    return all(record.timestamp_type == LOG_APPEND_TIME for record in records)


async def publish_ahead(
    producer: AheadProducer, topic: str, partition: int, commands: Sequence[Command]
) -> list[asyncio.Future[Any]]:
    """Send a batch's commands; their acknowledgements by every in-sync replica, to be awaited
    before the batch's transaction (a send refused at once is a failed acknowledgement)."""
    acks: list[asyncio.Future[Any]] = []
    for command in commands:
        try:
            acks.append(
                retrieving(
                    await producer.send(
                        topic, encode_command(command), key=command.run_id.encode(), partition=partition
                    )
                )
            )
        except KafkaError as exc:
            failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            acks.append(retrieving(failed))
            break
    return acks


async def write_plan(producer: TransactionalProducer, plan: CommitPlan, group_id: str) -> None:
    """The plan in one transaction: committed whole, or aborted (and the exception raised)."""
    partition = plan.source.partition
    writer = _writer(producer)
    try:
        async with producer.transaction():
            if writer is not None:
                write = writer.write
                for w in plan.writes:
                    write(w.topic, w.value, w.key, partition)
                if plan.group_offsets:
                    await producer.send_offsets_to_transaction({plan.source: plan.next_offset}, group_id)
                return
            sent: list[asyncio.Future[Any]] = []
            try:
                for w in plan.writes:
                    sent.append(
                        retrieving(await producer.send(w.topic, w.value, key=w.key, partition=partition))
                    )
            except IllegalOperation as exc:
                # aiokafka left the transaction when an earlier send failed: that failure (a
                # fencing, most often) is what the caller must see, not the refusal that followed.
                raise _failure_of(sent) or exc from exc
            # The offsets only once the records are acknowledged: adding the offsets to the
            # transaction (AddOffsetsToTxn) changes its state on the coordinator, and a record
            # whose verification (KIP-890) meets that change is refused as NOT_ENOUGH_REPLICAS
            # and retried: ~16 warnings a second on a healthy broker, for no gain in latency.
            await asyncio.gather(*sent)
            if plan.group_offsets:
                await producer.send_offsets_to_transaction({plan.source: plan.next_offset}, group_id)
    except Exception:
        retrieve_transaction_failures(producer)  # raised here: the sender's copies are seen too
        raise


def _writer(producer: TransactionalProducer) -> TransactionWriter | None:
    """The producer as a `TransactionWriter` when it is one, told by its `write` (an isinstance
    of a runtime-checkable protocol costs tens of µs, at every commit)."""
    return cast(TransactionWriter, producer) if hasattr(producer, "write") else None


def retrieving(send: Awaitable[Any]) -> asyncio.Future[Any]:
    """A send's future whose failure counts as seen: a commit raises the first failure of its
    sends, and the others' must not each log an error as never retrieved."""
    future = asyncio.ensure_future(send)
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
    return future


def _failure_of(sends: Sequence[asyncio.Future[Any]]) -> BaseException | None:
    """The first of these sends that has failed already, if any."""
    return next(
        (
            exc
            for send in sends
            if send.done() and not send.cancelled() and (exc := send.exception()) is not None
        ),
        None,
    )


@dataclass
class Applied:
    """A batch applied in memory (its commands published ahead, or being), waiting for the
    transaction that commits it, alone or with the partition's next batches."""

    records: int
    last_offset: int
    result: BatchResult
    # Its writes, the position last, the states' bytes taken when it was applied: a later batch
    # changes the states in place before this one commits.
    plan: CommitPlan
    acks: list[asyncio.Future[Any]]  # the ahead sends' acknowledgements
    started: float  # perf_counter when the batch was applied
    ahead: bool = False  # its commands were published ahead: no verdict waits for its commit
    publisher: AheadProducer | None = None  # the producer that published them ahead


def plan_batches(
    source: TopicPartition, batches: Sequence[Applied], group_offsets: bool = True
) -> CommitPlan:
    """Pure: consecutive applied batches of a partition as one plan: each batch's writes in
    order but its position, then the position after the last."""
    writes = [w for batch in batches for w in batch.plan.writes[:-1]]
    writes.append(batches[-1].plan.writes[-1])
    return CommitPlan(
        source,
        writes,
        batches[-1].plan.next_offset,
        {run: state for batch in batches for run, state in batch.plan.states.items()},
        [run for batch in batches for run in batch.plan.expired],
        group_offsets,
    )


@dataclass
class CommitLedger:
    """A partition's commit bookkeeping, kept by its task from one transaction to the next."""

    failures: int = 0  # its transactions failed in a row
    group_offsets_at: float = float("-inf")  # when (monotonic) its group offsets last rode along
    # The last offset of an applied batch that moved its clock to this worker's receipt time
    # (CreateTime records). Until that batch commits, its clock is in no log: a successor would
    # read it again at another time, so no later batch is published ahead.
    clock_of_receipt: int | None = None
    # Its uncommitted batches' commands: the last offset of a batch whose commands wait in its
    # transaction, and the producer that published the others ahead. A later batch is published
    # ahead only by that producer and only after such a batch: none overtakes an earlier one's
    # commands (commands of a run are in order). Reset when the uncommitted batches are discarded.
    inside_until: int | None = None
    ahead_by: AheadProducer | None = None
    ahead_until: int | None = None

    def committed_to(self, next_offset: int) -> None:
        """A commit up to `next_offset`: what it held back of later batches no longer holds."""
        if self.clock_of_receipt is not None and self.clock_of_receipt < next_offset:
            self.clock_of_receipt = None  # that clock is committed now
        if self.inside_until is not None and self.inside_until < next_offset:
            self.inside_until = None
        if self.ahead_until is not None and self.ahead_until < next_offset:
            self.ahead_by = self.ahead_until = None

    def discarded(self) -> None:
        self.inside_until = self.ahead_by = self.ahead_until = None


class CommitPartition(Protocol):
    """What a commit reads and keeps of a partition: its task (a stand-in in the unit tests)."""

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def states(self) -> PartitionStates: ...

    @property
    def producer(self) -> TransactionalProducer | None: ...

    @property
    def expiry(self) -> ExpiryScan: ...

    @property
    def ledger(self) -> CommitLedger: ...


class AbortedForAnother(KafkaError):
    """A transaction shared with other partitions (the group model) was aborted for another
    partition's part of it: this partition's writes are gone with it and its batches are read
    again, but the failure is not its own, so it does not count toward the failures in a row
    that end the worker. One tenant's failing part never ends the worker for the others of its
    group; its own part's failures still count for it."""


@dataclass(frozen=True, slots=True)
class Committed:
    """Committed whole: everything the batches wrote is visible, the position moved past them."""

    plan: CommitPlan


@dataclass(frozen=True, slots=True)
class Failed:
    """A send or the transaction failed and nothing of it is visible: the partition is rebuilt
    from what Kafka committed and its batches read again, unless it failed too often in a row
    (`final`: a failure that repeats is not the broker coming back, and ends the worker)."""

    error: KafkaError | IllegalOperation
    # The partition's own transactions failed in a row, this one included (one aborted for
    # another partition's part, `AbortedForAnother`, is not its own).
    attempt: int

    @property
    def final(self) -> bool:
        return self.attempt > MAX_BATCH_FAILURES


@dataclass(frozen=True, slots=True)
class Fenced:
    """The partition's producer was fenced: a successor's producer under its transactional id, or
    the broker's abort of the transaction for its age (`past_timeout`: the transaction was older
    than the transaction timeout), or a transaction coordinator that moved. Only the group can tell
    whose the partition is now, so the task gives it back to the group (see the module docstring)."""

    error: ProducerFenced
    past_timeout: bool


CommitOutcome = Committed | Failed | Fenced


class BatchCommitter:
    """Partition batches from records to committed: `apply` (in memory, commands published ahead),
    then `commit` of one or more applied batches in one transaction once every ahead send is
    acknowledged, which says how it went (`CommitOutcome`); what follows a failure is the
    partition task's to do (see the module docstring). One per pipeline; what it keeps of a
    partition is the partition's own (`CommitPartition`)."""

    def __init__(
        self,
        applier: BatchApplier,
        topics: CommitTopics,
        group_id: str,
        transaction_timeout_s: float = float("inf"),
        group_offsets_interval_s: float = 0.0,
        replace_ahead: Callable[[AheadProducer], Awaitable[AheadProducer]] | None = None,
        off_loop_event_bytes: int = 0,
        spent: Callable[[float], None] = lambda cpu_s: None,
    ) -> None:
        self.applier = applier
        # A batch holding an event this large is applied off the event loop (worker/slicing.py).
        self.off_loop_event_bytes = off_loop_event_bytes
        self.spent = spent  # told the CPU seconds of each slice of an apply
        self.topics = topics
        self.group_id = group_id
        # A fencing met by a transaction older than this may be the broker's abort of it for its
        # age (said in the log: the task's answer is the same).
        self.transaction_timeout_s = transaction_timeout_s
        self.group_offsets_interval_s = group_offsets_interval_s
        # The idempotent producer that publishes commands ahead of their transaction (None: in it),
        # and what replaces it when it breaks (None: nothing does).
        self.ahead: AheadProducer | None = None
        self.replace_ahead = replace_ahead

    async def apply(
        self,
        partition: CommitPartition,
        records: Sequence[SourceRecord],
        current: Callable[[], bool] = lambda: True,
        poison: Collection[int] = (),
    ) -> Applied | None:
        """Apply a batch to the partition's states in memory, the states taking its new runs and
        dropping its expired ones at once (the next batch reads them before this one commits),
        and send its commands ahead. Nothing of it is in Kafka's transactional record yet.

        The apply lets the event loop run every APPLY_SLICE_S, or runs on the apply thread
        (worker/slicing.py); `current()` says, after each pause, whether the partition still
        takes the batch. None when it no longer does (rebuilt or dropped meanwhile): nothing of
        the batch is planned or sent, and the states it changed are the ones the rebuild
        discarded. `poison`: offsets of events that killed a worker,
        dead-lettered unread (`BatchApplier.steps`)."""
        tp, states, ledger = partition.tp, partition.states, partition.ledger
        started = time.perf_counter()
        steps = self.applier.steps(records, states.load, states.clock, time.time(), states.live, poison)
        off_loop = holds_a_large_event(records, self.off_loop_event_bytes)
        result = await apply_in_slices(steps, current, off_loop, self.spent)
        if result is None:
            return None
        for run_id, state in result.states.items():
            states.put(run_id, state)
        # Scanned once the batch's states are in: a run the batch started in an expired run's
        # place is live, and the batch's own runs wait for the next scan.
        expired = [run_id for run_id in partition.expiry.due(states) if run_id not in result.states]
        for run_id in expired:
            states.delete(run_id)
        publisher = self.ahead
        if all_append_timed(records):
            ahead = (
                publisher is not None
                and ledger.clock_of_receipt is None
                and ledger.inside_until is None
                and (ledger.ahead_until is None or ledger.ahead_by is publisher)
            )
            if not ahead and result.commands:
                ledger.inside_until = records[-1].offset
        else:
            ahead, ledger.clock_of_receipt = False, records[-1].offset
        # Planned before the sends' await: the partition may be rebuilt or dropped meanwhile (the
        # caller then discards this batch), and its clock with it.
        plan = plan_commit(
            self.topics, tp, result, expired, records[-1].offset + 1, False, states.clock.newest, ahead
        )
        acks: list[asyncio.Future[Any]] = []
        if ahead and result.commands and publisher is not None:  # ahead: there is a producer
            ledger.ahead_by, ledger.ahead_until = publisher, records[-1].offset
            # Final for readers once acknowledged: whoever reads this batch again (a rebuild, a
            # successor) computes the same commands, byte for byte, from the same log and a
            # committed start state (docs/exactly-once.md).
            acks = await publish_ahead(publisher, self.topics.commands, tp.partition, result.commands)
            if _failure_of(acks) is not None:
                # A send refused at once (aiokafka's buffer full, no metadata, the producer
                # closed): the batch's later commands were never sent, and the producer is not
                # broken (no sequence number was used), so a later batch published ahead by it
                # would overtake them. Its commit fails and the partition is rebuilt; until then
                # later batches keep their commands inside their transaction.
                ledger.inside_until = records[-1].offset
            # When its verdicts were out (an idempotent producer acknowledges in order), for the
            # decision latency: its commit may come a commit interval later.
            acks[-1].add_done_callback(lambda _: setattr(result, "published_at", time.time()))
        return Applied(
            len(records), records[-1].offset, result, plan, acks, started, ahead, publisher if acks else None
        )

    async def commit(self, partition: CommitPartition, batches: Sequence[Applied]) -> CommitOutcome:
        """The applied batches in one transaction, once their ahead sends are acknowledged:
        `Committed`, or how it failed (nothing of it visible then). Counts the partition's
        failures in a row in its ledger."""
        tp, ledger = partition.tp, partition.ledger
        began = time.monotonic()
        try:
            await self._acknowledged(batches)
        except KafkaError as exc:
            # The worker's ahead producer, not the partition's: even a fencing of it says nothing
            # of whose the partition is, and a rebuild sends the commands again.
            ledger.failures += 1
            return Failed(exc, ledger.failures)
        acked = time.time()
        for batch in batches:
            if batch.acks and batch.result.published_at is None:
                batch.result.published_at = acked
        group_offsets = began - ledger.group_offsets_at >= self.group_offsets_interval_s
        plan = plan_batches(tp, batches, group_offsets)
        # The transaction's age starts here, after the acks: a long wait for them is no age of
        # the transaction, and would make a successor's fencing look like a timeout.
        txn_began = time.monotonic()
        try:
            await write_plan(_producer_of(partition), plan, self.group_id)
        except ProducerFenced as exc:
            # Younger than the timeout (on this clock, which started it before the broker saw
            # it), the transaction cannot have been aborted for its age.
            return Fenced(exc, time.monotonic() - txn_began >= self.transaction_timeout_s)
        except AbortedForAnother as exc:
            return Failed(exc, ledger.failures)  # not one of its own failures in a row
        except (KafkaError, IllegalOperation) as exc:
            # IllegalOperation: aiokafka's producer left its transaction, and no send of this
            # plan says why (write_plan raises a failed send's own error); a rebuild starts a
            # new producer either way.
            ledger.failures += 1
            return Failed(exc, ledger.failures)
        ledger.failures = 0
        if group_offsets:
            ledger.group_offsets_at = began
        partition.states.position = plan.next_offset
        ledger.committed_to(plan.next_offset)
        return Committed(plan)

    async def _acknowledged(self, batches: Sequence[Applied]) -> None:
        """Every ahead send of the batches acknowledged; if one failed, its producer is replaced
        before the error is raised. An idempotent producer that lost a send (it expired, or the
        broker restarted under it) numbers its next ones out of order, and the broker refuses
        every later send (OutOfOrderSequenceNumber) until a new producer id: the Java client
        bumps its epoch (KIP-360), aiokafka does not (aio-libs/aiokafka#1017). A command the old
        one may have published is published again, the same bytes under the same id
        (docs/exactly-once.md). The broker sees the gap only on a partition it holds the
        producer's state for: a fresh producer's later sends there are accepted, so its batches
        must never be lost unsent (`aiokafka_patch.batches_wait_for_a_leader`)."""
        sends = [(ack, batch.publisher) for batch in batches for ack in batch.acks]
        if all(ack.done() and not ack.cancelled() and ack.exception() is None for ack, _ in sends):
            return  # most often, a commit interval after the sends: no turn of the loop to wait
        try:
            await asyncio.gather(*(ack for ack, _ in sends))
        except KafkaError:
            # Only a producer whose send failed: another one in these batches is healthy.
            broken = {
                id(p): p
                for ack, p in sends
                if p is not None
                and ack.done()
                and not ack.cancelled()
                and isinstance(ack.exception(), KafkaError)
            }
            for publisher in broken.values():
                await self._replace_ahead(publisher)
            raise

    async def _replace_ahead(self, broken: AheadProducer) -> None:
        if self.ahead is not broken or self.replace_ahead is None:
            return  # another partition's commit replaced it already
        self.ahead = None  # meanwhile commands go inside their transactions
        log.warning("the producer of commands published ahead failed a send; replacing it")
        self.ahead = await self.replace_ahead(broken)


def _producer_of(partition: CommitPartition) -> TransactionalProducer:
    producer = partition.producer
    if producer is None:  # a task commits only while it has one: never dropped mid-commit
        raise RuntimeError(f"partition {partition.tp.partition} has no producer to commit with")
    return producer
