"""A tenant group's one transactional producer, and each partition task's share of it.

Every task of the group commits through its `TaskProducer`, the shape the commit path uses of a
transactional producer (`commit.TransactionalProducer`): the task's block (`transaction()`)
writes its batches' records and names its input offsets, as it would in a transaction of its
own. The group's `GroupTransactions` runs those blocks in phases, as Kafka Streams' executor
commits its tasks: a transaction opens with the first task's block and takes every block that
enters while it is open (prepare); once every block in it has ended, and a commit interval has
passed since it opened unless a verdict waits in it, the offsets of all its tasks go to the
transaction with the group's metadata and it commits (the one commit); each block then returns,
or raises what failed (post-commit), and the task goes on as after its own transaction.

Fencing is the group's generation (KIP-447): the offsets of a member the group moved on from are
refused, and its transaction is aborted. A successor reads the offsets stable (the consumer's
`committed`), so it waits for a previous owner's open transaction to end before it restores.
A fatal error of the producer (another process under its transactional id) is a fencing of every
task in the transaction, and a new producer starts at once: its start under the same transactional
id aborts the transaction the old one left open, which the fenced tasks' restores would otherwise
wait for until its coordinator's sweep. So is a call of the producer that outlives its timeout
(`calls.CallWedged`): the producer is left to the call, never used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as RdTopicPartition

from stallwatch.settings import Settings
from stallwatch_streams.worker.commit import AbortedForAnother
from stallwatch_streams.worker.confluent import calls
from stallwatch_streams.worker.confluent.calls import CallThread, CallWedged
from stallwatch_streams.worker.confluent.options import librdkafka_options

log = logging.getLogger(__name__)

# A transaction's coordinator aborts it this long after it began, and librdkafka fails its
# records still unsent by then: what a dead worker's open transaction holds back a successor
# (plus the broker's sweep). The partition model's 15 s, not Kafka Streams' 10 s: a lost broker's
# partitions move after its fencing and, when it was the controller, an election (up to 11 s on
# the test cluster, about 14 s with Kafka's default broker session), and a transaction open
# across that move would otherwise fail and rebuild every task of the group.
TRANSACTION_TIMEOUT_MS = 15_000
# A blocking call of the producer (its start, a commit, an abort) gives up after this long.
CALL_TIMEOUT_S = 30.0
# A call for a transaction gives up once the transaction is as old as its timeout, when its
# coordinator aborts it anyway, but is given at least this long.
MIN_CALL_S = 2.0
# A commit refused with a retriable error is tried again this many times.
COMMIT_TRIES = 5
# A transaction whose offsets the group refused because it moved to a new generation meanwhile
# (a rebalance completed between the metadata's read and the offsets' arrival: a worker joining
# makes two in a row under the cooperative protocol) is written again in a new one, with the
# group's metadata as it stands then, this many times at most, a pause between two. Only while
# the group has not taken any of its partitions away: see `GroupTransactions._again`. So is, once,
# a transaction begun just after an abort of the producer that fails on its own: an abort purges
# the records librdkafka had not sent yet, sequence numbers and all, and the producer's next
# transaction fails once on that gap (OUT_OF_ORDER_SEQUENCE_NUMBER, "requires epoch bump"), seen
# while a worker joined 300 tenants. Its abort bumps the epoch; written again, it commits.
GENERATION_TRIES = 5
GENERATION_PAUSE_S = 0.2
_GENERATION_MOVED = (RdKafkaError.ILLEGAL_GENERATION, RdKafkaError.REBALANCE_IN_PROGRESS)


class TransactionFailed(KafkaError):
    """The group's transaction failed and was aborted: nothing of it is visible."""


@dataclass
class _Transaction:
    opened: float  # monotonic
    linger_s: float
    deadline: float  # monotonic: its coordinator aborts it from then on (TRANSACTION_TIMEOUT_MS)
    members: int = 0
    urgent: bool = False  # a block wrote commands: a verdict waits for this commit
    failed: BaseException | None = None  # a block's own failure: the transaction is aborted
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # Every record its blocks wrote, in order: written again if the group's generation moved.
    writes: list[tuple[str, bytes | None, bytes | None, int]] = field(default_factory=list)
    sealed: bool = False  # committing: no block enters any more
    after_abort: bool = False  # begun just after an abort of the producer (see GENERATION_TRIES)
    written_for_gap: bool = False  # written again once already for failing after an abort
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None  # how it ended, for every block in it
    members_done: asyncio.Event = field(default_factory=asyncio.Event)


class GroupTransactions:
    """The group's transactional producer and its transactions, one at a time."""

    def __init__(
        self,
        settings: Settings,
        transactional_id: str,
        metadata: Callable[[], Any],
        commands_topics: Callable[[str], bool],
        make_producer: Callable[[dict[str, Any]], Producer] = Producer,
        holds: Callable[[Collection[TopicPartition]], bool] = lambda _: False,
    ) -> None:
        self._conf: dict[str, Any] = {
            **librdkafka_options(settings),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
        self.transactional_id = transactional_id
        self._metadata = metadata
        self._is_commands = commands_topics
        # Whether the group still holds these partitions (a revocation waiting for this
        # transaction counts, a loss does not): the group consumer's answer.
        self._holds = holds
        self._linger_s = settings.commit_interval_s
        self._make_producer = make_producer  # librdkafka's, or a fake in the unit tests
        self._producer: Producer | None = None
        self._txn: _Transaction | None = None
        self._starting = asyncio.Lock()
        # Producers replaced after a fatal error or a wedged call, kept from collection until the
        # worker stops (see `_retire` and `_run`).
        self._retired: list[Producer] = []
        self._calls = CallThread(f"stallwatch-txn-{transactional_id}")
        self._restarting: asyncio.Task[None] | None = None  # see `_replace`
        self._aborted = False  # the producer's last transaction was aborted
        self.transactions = 0  # committed, for the metrics and the benchmarks

    def participant(self, tp: TopicPartition) -> TaskProducer:
        return TaskProducer(self, tp)

    async def close(self) -> None:
        if self._restarting is not None:
            self._restarting.cancel()
            await asyncio.gather(self._restarting, return_exceptions=True)
        await self._retire()
        self._calls.stop()

    # -- the phases --------------------------------------------------------------------------

    async def enter(self) -> _Transaction:
        """Prepare: a block enters the open transaction, or opens one."""
        while True:
            txn = self._txn
            if txn is None:
                producer = await self._started()
                if self._txn is not None:
                    continue  # another block opened one while this one started the producer
                producer.begin_transaction()
                now = time.monotonic()
                txn = self._txn = _Transaction(now, self._linger_s, now + TRANSACTION_TIMEOUT_MS / 1000)
                txn.after_abort, self._aborted = self._aborted, False
                asyncio.get_running_loop().create_task(self._commit(txn), name=f"txn-{self.transactional_id}")
            if txn.sealed:
                await txn.ended.wait()
                continue
            txn.members += 1
            txn.members_done.clear()
            return txn

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None:
        producer = self._producer
        if producer is None:
            raise TransactionFailed("the group's producer is gone")
        txn = self._txn
        if txn is not None:
            txn.writes.append((topic, value, key, partition))
            if self._is_commands(topic):
                txn.urgent = True
        self._write(producer, topic, value, key, partition)

    @staticmethod
    def _write(producer: Producer, topic: str, value: bytes | None, key: bytes | None, number: int) -> None:
        while True:
            try:
                producer.produce(topic, value, key, number)
                return
            except BufferError:
                producer.poll(0.01)  # the queue full: delivery reports served, then again
            except KafkaException as exc:
                raise _translated(exc) from exc

    async def leave(
        self, txn: _Transaction, failure: BaseException | None, offsets: dict[TopicPartition, int]
    ) -> None:
        """A block ends: its offsets join the transaction; it returns once the transaction
        ended, or raises how it failed."""
        txn.offsets.update(offsets)
        if failure is not None and txn.failed is None:
            txn.failed = failure
        txn.members -= 1
        if txn.members == 0:
            txn.members_done.set()
        await txn.ended.wait()
        if txn.error is not None and failure is None:
            raise txn.error

    async def _commit(self, txn: _Transaction) -> None:
        """The one commit: once every block in it ended and the interval passed (at once when a
        verdict waits in it, or a block failed)."""
        try:
            while True:
                await txn.members_done.wait()
                if txn.members:
                    txn.members_done.clear()
                    continue  # a block entered after the last one left
                wait = 0.0 if (txn.urgent or txn.failed) else txn.opened + txn.linger_s - time.monotonic()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)  # the commit interval: more tasks' blocks join it
            txn.sealed = True
            if txn.failed is not None:
                await self._abort(
                    TransactionFailed(f"a task's part of the transaction failed: {txn.failed!r}")
                )
                txn.error = AbortedForAnother(f"aborted for another task's part: {txn.failed!r}")
            else:
                txn.error = await self._end(txn)
        except BaseException as exc:
            txn.error = exc if isinstance(exc, KafkaError) else TransactionFailed(repr(exc))
            raise
        finally:
            self._txn = None
            txn.ended.set()

    async def _end(self, txn: _Transaction) -> BaseException | None:
        """The offsets and the commit; written again in a new transaction while the group's
        generation moved under it (GENERATION_TRIES)."""
        attempt = 0
        while True:
            error = await self._end_once(txn)
            if error is None or not await self._again(txn, error, attempt):
                return error
            attempt += 1

    async def _again(self, txn: _Transaction, error: BaseException, attempt: int) -> bool:
        """Whether the aborted transaction is written again: when the group moved to a new
        generation under it, or when it began just after an abort (GENERATION_TRIES); not on the
        last attempt, and only while the group holds every partition of its offsets. A member the
        group removed (its session lapsed: the partitions lost) is a zombie, and its offsets stay
        refused; a member that only rebalanced holds its partitions until it lets them go, which a
        revocation does only once this transaction ended (the group's thread waits for it), so no
        other member can own them yet and fencing is not weakened."""
        moved = isinstance(error, GenerationMoved)
        # Once only: a failure of its own that comes again is the transaction's, not the gap's.
        gap = isinstance(error, TransactionFailed) and txn.after_abort and not txn.written_for_gap
        if not (moved or gap) or attempt == GENERATION_TRIES:
            return False
        if self._producer is None or not self._holds(txn.offsets):
            return False
        log.info(
            "the transaction of %s failed %s; writing it again",
            self.transactional_id,
            "as the group moved to a new generation under it" if moved else "just after an abort",
        )
        await asyncio.sleep(GENERATION_PAUSE_S * (attempt + 1))
        producer = self._producer
        if producer is None or not self._holds(txn.offsets):
            return False
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            log.warning("the transaction of %s could not begin again: %s", self.transactional_id, exc)
            return False
        txn.deadline = time.monotonic() + TRANSACTION_TIMEOUT_MS / 1000
        txn.written_for_gap = txn.written_for_gap or not moved
        txn.after_abort, self._aborted = True, False
        try:
            for topic, value, key, partition in txn.writes:
                self._write(producer, topic, value, key, partition)
        except KafkaError as exc:  # what `_write` raises of librdkafka's refusal
            await self._abort(exc)
            return False
        return True

    async def _end_once(self, txn: _Transaction) -> BaseException | None:
        producer = self._producer
        assert producer is not None
        offsets = [RdTopicPartition(tp.topic, tp.partition, offset) for tp, offset in txn.offsets.items()]
        try:
            if offsets:
                metadata = self._metadata()
                await self._retried(
                    txn,
                    producer,
                    lambda timeout_s: producer.send_offsets_to_transaction(offsets, metadata, timeout_s),
                )
            await self._retried(txn, producer, producer.commit_transaction)
        except CallWedged as exc:
            await self._replace()
            return self._wedged(exc)
        except KafkaException as exc:
            error = _translated(exc)
            if isinstance(error, ProducerFenced):
                await self._replace()
            else:
                await self._abort(error)
            return error
        self.transactions += 1
        return None

    async def _retried(self, txn: _Transaction, producer: Producer, call: Callable[[float], Any]) -> None:
        """`call`, given the time its transaction has left, tried again while it fails with a
        retriable error (a coordinator moving or loading after a broker's loss) and the
        transaction has time left: librdkafka resumes the step where it stopped."""
        for attempt in range(COMMIT_TRIES):
            timeout_s = min(CALL_TIMEOUT_S, max(MIN_CALL_S, txn.deadline - time.monotonic()))
            try:
                await self._run(functools.partial(call, timeout_s), producer, timeout_s)
                return
            except KafkaException as exc:
                last = attempt == COMMIT_TRIES - 1 or time.monotonic() >= txn.deadline
                if not exc.args[0].retriable() or last:
                    raise

    async def _abort(self, error: KafkaError) -> None:
        """The open transaction aborted, tried again while the broker is away (librdkafka resumes
        a timed-out abort); a producer that cannot abort is replaced."""
        producer = self._producer
        if producer is None:
            return
        for _ in range(COMMIT_TRIES):
            try:
                await self._run(lambda: producer.abort_transaction(CALL_TIMEOUT_S), producer)
                self._aborted = True
                return
            except CallWedged:
                await self._replace()  # the producer left to its call (`_run`)
                return
            except KafkaException as exc:
                if exc.args[0].fatal():
                    break
                log.debug("the transaction of %s is not aborted yet: %s", self.transactional_id, exc)
        log.warning(
            "the transaction of %s could not be aborted (%s); starting a new producer",
            self.transactional_id,
            error,
        )
        await self._replace()

    async def _replace(self) -> None:
        """The producer let go and a new one started now, not at the next transaction: the new
        one's start under the same transactional id aborts whatever transaction the old one left
        open, and the fenced tasks' restores read their offsets stable, which waits for that
        transaction to end (else until its coordinator aborts it: its timeout, then a sweep of up
        to 10 s)."""
        await self._retire()
        if self._restarting is None or self._restarting.done():
            self._restarting = asyncio.get_running_loop().create_task(
                self._start_early(), name=f"restart-{self.transactional_id}"
            )

    async def _start_early(self) -> None:
        try:
            await self._started()
        except KafkaError as exc:  # the next transaction tries again
            log.info("the new producer of %s did not start yet: %r", self.transactional_id, exc)

    async def _retire(self) -> None:
        """The producer let go, its queue emptied first: librdkafka would otherwise serve what is
        left in it while the object is collected, outside any call, and the binding aborts."""
        producer, self._producer = self._producer, None
        if producer is None:
            return

        def empty() -> None:
            with contextlib.suppress(Exception):
                producer.purge()
            with contextlib.suppress(Exception):
                producer.flush(1.0)

        self._retired.append(producer)
        with contextlib.suppress(CallWedged):
            await self._run(empty, producer)

    async def _started(self) -> Producer:
        """The group's producer, started once: a second one under the same transactional id
        would fence the first."""
        async with self._starting:
            if self._producer is None:
                producer = self._make_producer(self._conf)
                self._aborted = False  # a new producer's sequence numbers start afresh
                try:
                    await self._run(lambda: producer.init_transactions(CALL_TIMEOUT_S), producer)
                except asyncio.CancelledError:
                    self._retired.append(producer)  # its start goes on on the calls' thread
                    raise
                except KafkaException as exc:
                    raise _translated(exc) from exc
                except CallWedged as exc:
                    raise self._wedged(exc) from exc
                self._producer = producer
            return self._producer

    def _wedged(self, exc: CallWedged) -> ProducerFenced:
        """A wedged call as the commit path reads it: a fencing of every block it served."""
        return ProducerFenced(f"the producer of {self.transactional_id} is wedged: {exc}")

    async def _run(
        self, call: Callable[[], Any], producer: Producer, timeout_s: float = CALL_TIMEOUT_S
    ) -> Any:
        """`call` (a call of `producer` that gives up after `timeout_s`) made on the calls'
        thread. One still out WEDGED_AFTER_S later leaves its producer wedged: it is kept from
        collection and never called again, and a new thread makes the next calls (CallWedged
        raised)."""
        try:
            return await self._calls.run(call, timeout_s)
        except CallWedged:
            if producer is self._producer:
                self._producer = None
            if producer not in self._retired:
                self._retired.append(producer)
            self._calls = CallThread(f"stallwatch-txn-{self.transactional_id}")
            log.warning(
                "a call of the producer of %s was still out %.1f s past its timeout (%.1f s); the "
                "producer is left to it, and the next transaction starts a new one",
                self.transactional_id,
                calls.WEDGED_AFTER_S,
                timeout_s,
            )
            raise


class TaskProducer:
    """One partition task's share of its group's transactions (`commit.TransactionalProducer`)."""

    def __init__(self, group: GroupTransactions, tp: TopicPartition) -> None:
        self.group = group
        self.tp = tp
        self._offsets: dict[TopicPartition, int] = {}

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        txn = await self.group.enter()
        self._offsets = {}
        try:
            yield
        except BaseException as exc:
            await self.group.leave(txn, exc, {})
            raise
        await self.group.leave(txn, None, self._offsets)

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[Any]:
        """Written into the open transaction; acknowledged with its commit, which fails whole if
        any record of it failed."""
        self.write(topic, value, key, self.tp.partition if partition is None else partition)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def write(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None:
        """`send` with no future (`commit.TransactionWriter`)."""
        self.group.produce(topic, value, key, partition)

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        self._offsets.update(offsets)

    async def stop(self) -> None:
        """The task lets go of its share; the group's producer stays for the others."""


class GenerationMoved(TransactionFailed):
    """The group refused the transaction's offsets: it moved to a new generation meanwhile."""


def _translated(exc: KafkaException) -> KafkaError:
    """librdkafka's error as the commit path's outcomes read it: a fatal one (the producer
    fenced, or unusable) as a fencing, any other as a failed transaction."""
    error = exc.args[0] if exc.args else None
    if error is not None and hasattr(error, "fatal") and error.fatal():
        return ProducerFenced()
    if error is not None and hasattr(error, "code") and error.code() in _GENERATION_MOVED:
        return GenerationMoved(str(error))
    return TransactionFailed(str(error))
