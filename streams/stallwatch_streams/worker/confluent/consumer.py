"""A tenant group's consumer: one librdkafka consumer subscribed to every events topic of the
group's tenants, with the cooperative-sticky assignor (a tenant's arrival assigns its
partitions without revoking any other's), and each tenant's view of it.

librdkafka's Python consumer admits one caller at a time (a call from another thread waits for
the one in progress, a `consume` of up to its timeout), so one thread of the group's own makes
every call: the event loop queues its operations (seek, pause, resume, a subscription) and the
thread applies them between two `consume` calls of CONSUME_TIMEOUT_S. Records and partition
changes go back to the loop, to the view of the tenant whose topic they are.

A rebalance reaches the tenants' pipelines as aiokafka's listener would: a revocation waits,
on the thread, until the tenant's batches in flight committed (the thread keeps applying the
loop's operations meanwhile); an assignment is handed to the tenant and its new partitions stay
paused until the tenant restored them, so nothing is read before a task can take it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message
from confluent_kafka import TopicPartition as RdTopicPartition

from stallwatch.settings import Settings
from stallwatch_streams.worker.confluent.calls import settle
from stallwatch_streams.worker.confluent.options import librdkafka_options
from stallwatch_streams.worker.confluent.records import Record, record_of
from stallwatch_streams.worker.progress import Progress

log = logging.getLogger(__name__)

# How long the thread's `consume` waits for records: also how soon a queued operation (a seek,
# a resume) is applied when nothing arrives.
CONSUME_TIMEOUT_S = 0.02
# Records taken per `consume`, over all of the group's partitions.
FETCH_MAX_RECORDS = 4000
# The broker holds an empty fetch this long; it answers as soon as a record arrives, so this
# only bounds how long a resumed partition waits for the fetch in flight.
FETCH_WAIT_MAX_MS = 100
# An idle tenant's consume loop is parked until its records arrive, a failure of its pipeline
# wakes it, or this long passed: a thousand tenants' loops waking every second cost a sixth of a
# core with nothing to do (every 100 ms, as over aiokafka, half a core). Parked, its progress is
# the group's thread's (`Progress.waiting`): a loop parked on a live consumer is not stalled.
PARKED_WAKE_S = 10.0
# A tenant's pauses for its records waiting are logged at most this often.
HOLDS_SAID_EVERY_S = 60.0
# A blocking call made for the loop (committed offsets, topics) gives up after this long.
CALL_TIMEOUT_S = 10.0
# The group's session, longer than the partition model's (membership.SESSION_TIMEOUT_MS):
# librdkafka takes its partitions for lost, and rejoins as a new member, once its coordinator has
# not answered a heartbeat for a session, where aiokafka keeps them and finds the new coordinator.
# A broker's loss moves the coordinators it hosted after its fencing and, when it was the
# controller, an election (up to 11 s measured on the three-node cluster, about 14 s with Kafka's
# default broker session): the session outlasts that, so such a loss stops no partition of the
# groups. The price: a dead worker's partitions move after it (docs/decisions.md).
SESSION_TIMEOUT_MS = 20_000

Operation = Callable[[Consumer], None]


@dataclass(frozen=True, slots=True)
class _Queued:
    operation: Operation
    # Whether it may run inside a rebalance callback: the binding keeps one call state per
    # thread, and a call that sets its own (`list_topics`, `consume`, `close`) clears it on
    # return, so a later callback of the same `consume` would abort the process.
    in_callback: bool = True


class ConsumerCallFailed(KafkaError):
    """A call of the group's consumer failed (the broker away, a timeout): tried again."""


class RebalanceListener(Protocol):
    """What a view calls of its tenant's pipeline, as aiokafka calls its listener."""

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None: ...


class FetchBudget:
    """The bytes of fetched records waiting in a group's views, against the group's share of the
    worker's budget (`STALLWATCH_FETCH_BUFFER_MAX_BYTES`). Kept on the loop by the views."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.waiting = 0
        self.views = 0

    def over(self) -> bool:
        return self.waiting > self.max_bytes

    def fair_share(self) -> int:
        """What one tenant may have waiting while the group is over its budget."""
        return self.max_bytes // max(1, self.views)


class GroupConsumer:
    """One tenant group's consumer and the thread that drives it."""

    def __init__(self, settings: Settings, group_id: str, instance_id: str | None) -> None:
        conf: dict[str, Any] = {
            **librdkafka_options(settings),
            "group.id": group_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            # Offsets read with require_stable: a partition taken over waits for its previous
            # owner's open transaction to end (KIP-447), and so does its changelog's restore.
            "isolation.level": "read_committed",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 2000,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            "queued.max.messages.kbytes": 16384,
        }
        if instance_id:
            conf["group.instance.id"] = instance_id
        self.view_max_bytes = settings.fetch_buffer_max_bytes_per_tenant
        self.budget = FetchBudget(settings.fetch_buffer_max_bytes // settings.tenant_groups)
        self.group_id = group_id
        self._conf = conf
        self._consumer: Consumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ops: queue.SimpleQueue[_Queued] = queue.SimpleQueue()
        self._views: dict[str, TenantView] = {}  # by events topic
        self._subscribed: tuple[str, ...] = ()
        self._owned: dict[str, set[int]] = {}  # the thread's: partitions assigned, by topic
        # The thread's: partitions a revocation (not a loss) is letting go once their tenants'
        # batches in flight committed: still this member's to commit offsets for until then.
        self._revoking: set[TopicPartition] = set()
        self._revoked_topics: set[str] = set()  # revoked since the last assignment
        self._served_topics: set[str] = set()  # topics whose tenants had an assignment
        self._applied_seeks: dict[TopicPartition, int] = {}  # the thread's: seeks applied
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.metadata: Any = None  # the group's metadata for transactions, renewed by the thread
        self._reads: dict[TopicPartition, list[asyncio.Future[int | None]]] = {}
        self._reading = asyncio.Lock()
        self._read_tasks: set[asyncio.Task[None]] = set()
        self._reader: Consumer | None = None  # see `committed`
        self._offset_calls = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"stallwatch-offsets-{group_id}"
        )
        self.closing = False  # the worker stops: its tenants leave with the group, not one by one
        self.failure: BaseException | None = None
        # When (monotonic) the thread last went round, or waited on a revocation: the progress of
        # every tenant's loop parked on this consumer.
        self.went_round = time.monotonic()

    # -- the loop's side ---------------------------------------------------------------------

    def view(self, topic: str) -> TenantView:
        view = self._views.get(topic)
        if view is None:
            view = self._views[topic] = TenantView(self, topic, self.view_max_bytes, self.budget)
            self.budget.views += 1
        return view

    def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._consumer = Consumer(self._conf)
        self._thread = threading.Thread(target=self._run, name=f"stallwatch-{self.group_id}", daemon=True)
        self._thread.start()

    def submit(self, operation: Operation, in_callback: bool = True) -> None:
        self._ops.put(_Queued(operation, in_callback))

    async def call(self, blocking: Callable[[Consumer], Any], in_callback: bool = True) -> Any:
        """`blocking` run on the thread, its result (or error) given back to the loop."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def operation(consumer: Consumer) -> None:
            try:
                result = blocking(consumer)
            except KafkaException as exc:
                loop.call_soon_threadsafe(settle, done, None, ConsumerCallFailed(str(exc)))
            except BaseException as exc:
                loop.call_soon_threadsafe(settle, done, None, exc)
            else:
                loop.call_soon_threadsafe(settle, done, result, None)

        self.submit(operation, in_callback)
        return await done

    async def committed(self, tp: TopicPartition) -> int | None:
        """`tp`'s committed offset, read stable: the broker answers once no open transaction
        holds an offset of it, which may take a dead owner's transaction timeout. So it is read
        through a second handle in the same group but no member of it, on a thread of its own:
        the group's consumer keeps consuming and rebalancing meanwhile. The reads asked for while
        one is under way go together in the next request (a worker joining a group of hundreds
        of tenants reads hundreds of partitions' offsets)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int | None] = loop.create_future()
        self._reads.setdefault(tp, []).append(done)
        # A task of its own: a caller cancelled meanwhile must not leave the others' reads unanswered.
        reading = loop.create_task(self._read_pending(), name=f"offsets-{self.group_id}")
        self._read_tasks.add(reading)
        reading.add_done_callback(self._read_tasks.discard)
        return await done

    async def _read_pending(self) -> None:
        async with self._reading:
            reads, self._reads = self._reads, {}
            if not reads:
                return  # read together with earlier ones
            tps = [RdTopicPartition(tp.topic, tp.partition) for tp in reads]
            loop = asyncio.get_running_loop()
            try:
                found = await loop.run_in_executor(
                    self._offset_calls, lambda: self._offsets_reader().committed(tps, timeout=CALL_TIMEOUT_S)
                )
            except KafkaException as exc:
                _answer(reads, None, ConsumerCallFailed(str(exc)))
                return
            answers: dict[TopicPartition, Any] = {}
            for one in found:
                answers[TopicPartition(one.topic, one.partition)] = (
                    ConsumerCallFailed(str(one.error))
                    if one.error is not None
                    else (one.offset if one.offset >= 0 else None)
                )
            _answer(reads, answers, None)

    def _offsets_reader(self) -> Consumer:
        """On the reads' thread: the second handle, made at its first use."""
        if self._reader is None:
            conf = {k: v for k, v in self._conf.items() if k != "group.instance.id"}
            self._reader = Consumer(conf)
        return self._reader

    def resubscribe(self) -> None:
        self.submit(lambda consumer: self._subscribe(consumer))

    def detach(self, topic: str) -> None:
        view = self._views.pop(topic, None)
        if view is not None:
            view.forget_waiting()
            self.budget.views -= 1

    async def stop(self) -> None:
        """Leave the group (the partitions move at once) and end the threads."""
        self._stopping.set()
        thread = self._thread
        loop = asyncio.get_running_loop()
        if thread is not None:
            await loop.run_in_executor(None, thread.join, CALL_TIMEOUT_S)
        reader = self._reader
        if reader is not None:
            with contextlib.suppress(Exception):
                await loop.run_in_executor(self._offset_calls, reader.close)
        self._offset_calls.shutdown(wait=False)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while not self._stopping.is_set():
                self.went_round = time.monotonic()
                self._apply_ops(consumer)
                messages = self._consume(consumer)
                with contextlib.suppress(KafkaException, RuntimeError):
                    self.metadata = consumer.consumer_group_metadata()
                if messages:
                    self._deliver(consumer, messages)
        except BaseException as exc:
            self.failure = exc
            log.exception("the consumer of %s failed", self.group_id)
            if self._loop is not None:
                for view in list(self._views.values()):
                    self._loop.call_soon_threadsafe(view.wake)  # to raise it
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _consume(self, consumer: Consumer) -> list[Message]:
        """What has arrived, as soon as anything has: `consume` would wait out its whole timeout
        for a full batch, `poll` returns with the first record, and the rest is taken without
        waiting."""
        first = consumer.poll(CONSUME_TIMEOUT_S)
        if first is None:
            return []
        return [first, *consumer.consume(FETCH_MAX_RECORDS - 1, 0)]

    def _apply_ops(self, consumer: Consumer, in_callback: bool = False) -> None:
        later: list[_Queued] = []
        while True:
            try:
                queued = self._ops.get_nowait()
            except queue.Empty:
                break
            if in_callback and not queued.in_callback:
                later.append(queued)
                continue
            try:
                queued.operation(consumer)
            except KafkaException as exc:
                # A seek or pause of a partition no longer assigned: the next assignment says
                # where it reads from.
                log.debug("the consumer of %s refused an operation: %s", self.group_id, exc)
        for queued in later:
            self._ops.put(queued)

    def _subscribe(self, consumer: Consumer) -> None:
        topics = tuple(sorted(self._views))
        if topics == self._subscribed:
            return
        self._subscribed = topics
        if topics:
            consumer.subscribe(
                list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        else:
            consumer.unsubscribe()

    def _deliver(self, consumer: Consumer, messages: list[Message]) -> None:
        batches: dict[TopicPartition, list[Record]] = {}
        for message in messages:
            if message.error() is not None:
                log.debug("the consumer of %s: %s", self.group_id, message.error())
                continue
            record = record_of(message)
            batches.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        highwaters = {}
        for tp in batches:
            with contextlib.suppress(KafkaException):
                highwaters[tp] = consumer.get_watermark_offsets(
                    RdTopicPartition(tp.topic, tp.partition), cached=True
                )[1]
        seeks = {tp: self._applied_seeks.get(tp, 0) for tp in batches}
        loop = self._loop
        assert loop is not None
        loop.call_soon_threadsafe(self._hand_out, batches, seeks, highwaters)

    def _hand_out(
        self,
        batches: dict[TopicPartition, list[Record]],
        seeks: dict[TopicPartition, int],
        highwaters: dict[TopicPartition, int],
    ) -> None:
        for tp, records in batches.items():
            view = self._views.get(tp.topic)
            if view is not None:
                view.receive(tp, records, seeks[tp], highwaters.get(tp))

    def _on_assign(self, consumer: Consumer, partitions: list[RdTopicPartition]) -> None:
        # The new partitions paused until their tenant restored them.
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
        with contextlib.suppress(KafkaException, RuntimeError):
            self.metadata = consumer.consumer_group_metadata()
        new: dict[str, list[int]] = {}
        for p in partitions:
            self._owned.setdefault(p.topic, set()).add(p.partition)
            new.setdefault(p.topic, []).append(p.partition)
        # A tenant whose topic is subscribed and that never had an assignment gets its first, even
        # an empty one (the group balances all of its tenants' partitions, so a worker may hold
        # none of one tenant's): its pipeline counts as served, as under its own group.
        first = set(self._subscribed) - self._served_topics
        touched, self._revoked_topics = set(new) | self._revoked_topics | first, set()
        self._served_topics |= touched
        loop = self._loop
        assert loop is not None
        for topic in touched:
            owned = sorted(self._owned.get(topic, ()))
            loop.call_soon_threadsafe(self._assigned, topic, owned, new.get(topic, []))

    def _assigned(self, topic: str, owned: list[int], new: list[int]) -> None:
        view = self._views.get(topic)
        if view is not None:
            view.assigned(owned, new)

    def _on_revoke(self, consumer: Consumer, partitions: list[RdTopicPartition]) -> None:
        revoking = {TopicPartition(p.topic, p.partition) for p in partitions}
        self._revoking |= revoking
        try:
            self._take_away(consumer, partitions)
        finally:
            self._revoking -= revoking

    def _on_lost(self, consumer: Consumer, partitions: list[RdTopicPartition]) -> None:
        log.warning(
            "the consumer of %s lost %d partitions (its session expired)", self.group_id, len(partitions)
        )
        self._take_away(consumer, partitions)

    def holds(self, partitions: Collection[TopicPartition]) -> bool:
        """Whether every one of these partitions is still this member's to commit offsets for:
        assigned, or being revoked (the revocation waits for the batches in flight), not lost."""
        owned, revoking = self._owned, self._revoking
        return all(tp.partition in owned.get(tp.topic, ()) or tp in revoking for tp in partitions)

    def _take_away(self, consumer: Consumer, partitions: list[RdTopicPartition]) -> None:
        """Wait until each tenant's batches in flight committed, applying the loop's operations
        meanwhile (a restore under way may wait for one), then let the partitions go."""
        with contextlib.suppress(KafkaException, RuntimeError):
            self.metadata = consumer.consumer_group_metadata()
        gone: dict[str, list[int]] = {}
        for p in partitions:
            self._owned.get(p.topic, set()).discard(p.partition)
            gone.setdefault(p.topic, []).append(p.partition)
        self._revoked_topics |= set(gone)
        loop = self._loop
        assert loop is not None
        waits = []
        for topic, lost in gone.items():
            view = self._views.get(topic)
            if view is not None:
                waits.append(asyncio.run_coroutine_threadsafe(view.revoked(lost), loop))
        for wait in waits:
            while not self._stopping.is_set():
                self.went_round = time.monotonic()
                self._apply_ops(consumer, in_callback=True)
                try:
                    wait.result(CONSUME_TIMEOUT_S)
                    break
                except concurrent.futures.TimeoutError:
                    continue
                except Exception as exc:
                    log.warning("a tenant's revocation in %s failed: %r", self.group_id, exc)
                    break
        consumer.incremental_unassign(partitions)

    def seek_applied(self, tp: TopicPartition) -> None:
        """On the thread: a seek of `tp` applied; records consumed from now on are after it."""
        self._applied_seeks[tp] = self._applied_seeks.get(tp, 0) + 1


class TenantView:
    """One tenant's share of its group's consumer, in the shape its pipeline uses of aiokafka's
    consumer: its records, its partitions, and operations on them."""

    def __init__(self, group: GroupConsumer, topic: str, max_bytes: int, budget: FetchBudget) -> None:
        """`max_bytes`: the tenant's records waiting in the view past which its partitions are
        paused in the group's consumer until its pipeline has taken half of them. A tenant whose
        pipeline is slower than the group's fetches (a flood of its largest events, a backlog
        read after a restart) holds at most this, one consume batch and the batch in its
        pipeline's hands of the worker's memory. `budget`: the group's; while its views hold
        more than it, a tenant holds no more than its fair share of it (every tenant of a
        group read back from a backlog at once)."""
        self.group = group
        self.topic = topic
        self.max_bytes = max_bytes
        self.budget = budget
        self.listener: RebalanceListener | None = None
        # Its pipeline's progress, whose beat is the group's thread's while the loop is parked.
        self.progress: Progress | None = None
        self._records: dict[TopicPartition, list[Record]] = {}
        self._arrived = asyncio.Event()
        self._woken = False  # a wake not yet seen by the loop
        self._seeks: dict[TopicPartition, int] = {}  # seeks asked for, by partition
        self._paused: set[TopicPartition] = set()  # by the pipeline
        self._held: set[TopicPartition] = set()  # by the view: too much waiting (`max_bytes`)
        self._bytes: dict[TopicPartition, int] = {}  # of the records waiting, by partition
        self._holds, self._held_said_at = 0, -HOLDS_SAID_EVERY_S  # pauses for waiting records
        self._owned: set[TopicPartition] = set()
        self._highwaters: dict[TopicPartition, int] = {}
        self._changes: asyncio.Lock = asyncio.Lock()

    # -- what the pipeline calls -------------------------------------------------------------

    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None:
        self.listener = listener
        self.group.resubscribe()

    async def start(self) -> None:
        self.group.start()

    async def stop(self) -> None:
        """The tenant leaves its group: its topic is dropped from the subscription (unless the
        whole group is closing, which leaves the group at once)."""
        self.listener = None
        self.group.detach(self.topic)
        if not self.group.closing:
            self.group.resubscribe()

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Record]]:
        if self.group.failure is not None:
            raise self.group.failure
        if timeout_ms and not self._deliverable():
            await self._parked()
        taken = {tp: records for tp, records in self._records.items() if tp not in self._paused}
        for tp in taken:
            del self._records[tp]
            self._forget(tp)
        if self._held and self._may_fetch_again():
            self._release()
        return taken

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._seek(tp, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._seek(tp, OFFSET_BEGINNING)

    def pause(self, *partitions: TopicPartition) -> None:
        self._paused.update(partitions)
        rd = [RdTopicPartition(tp.topic, tp.partition) for tp in partitions]
        self.group.submit(lambda consumer: consumer.pause(rd))

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused.difference_update(partitions)
        # One the view holds is fetched again once its records are taken (`_release`).
        rd = [RdTopicPartition(tp.topic, tp.partition) for tp in partitions if tp not in self._held]
        if rd:
            self.group.submit(lambda consumer: consumer.resume(rd))
        if self._deliverable():
            self._arrived.set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of `tp`, read stable: it waits until no transaction
        holding an offset of it is open (a previous owner's ends or is aborted first)."""

        return await self.group.committed(tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._highwaters.get(tp)

    async def topics(self) -> set[str]:
        metadata = await self.group.call(
            lambda consumer: consumer.list_topics(timeout=CALL_TIMEOUT_S), in_callback=False
        )
        return set(metadata.topics)

    def request_rejoin(self) -> None:
        """librdkafka has no forced rebalance: the tenant's partitions are handed to it again as
        they stand, and the dropped tasks among them restored (their offsets read stable)."""
        owned = sorted(tp.partition for tp in self._owned)
        asyncio.get_running_loop().call_soon(self.assigned, owned, [])

    def set_fetch_max_wait(self, wait_ms: int) -> None:
        """The group's fetches serve every tenant: its wait is fixed (FETCH_WAIT_MAX_MS)."""

    def wake(self) -> None:
        """The parked loop goes round now (its pipeline failed: the loop raises it), or at its
        next `getmany` if it is not parked."""
        self._woken = True
        self._arrived.set()

    # -- what the group calls ----------------------------------------------------------------

    def receive(self, tp: TopicPartition, records: list[Record], seeks: int, highwater: int | None) -> None:
        if seeks < self._seeks.get(tp, 0):
            return  # consumed before a seek the loop asked for: read again from there
        if highwater is not None:
            self._highwaters[tp] = highwater
        self._records.setdefault(tp, []).extend(records)
        size = sum(_size(record) for record in records)
        self._bytes[tp] = self._bytes.get(tp, 0) + size
        self.budget.waiting += size
        if tp not in self._paused:
            self._arrived.set()
        if self._too_much_waiting():
            self._hold()

    def assigned(self, owned: list[int], new: list[int]) -> None:
        asyncio.get_running_loop().create_task(self._assigned(owned, new), name=f"assign-{self.topic}")

    async def revoked(self, partitions: list[int]) -> None:
        async with self._changes:
            gone = {TopicPartition(self.topic, p) for p in partitions}
            self._owned -= gone
            self._paused -= gone  # a partition assigned again starts unpaused, as in aiokafka
            self._held -= gone
            for tp in gone:
                self._records.pop(tp, None)
                self._forget(tp)
            if self.listener is not None:
                await self.listener.on_partitions_revoked(sorted(gone))

    async def _assigned(self, owned: list[int], new: list[int]) -> None:
        async with self._changes:
            fresh = [TopicPartition(self.topic, p) for p in new]
            self._paused.difference_update(fresh)
            self._owned = {TopicPartition(self.topic, p) for p in owned}
            if self.listener is not None:
                await self.listener.on_partitions_assigned(sorted(self._owned))
            # Paused by the group's thread until now; a task that held its partition meanwhile
            # (a rebuild under way) resumes it itself.
            ready = [tp for tp in fresh if tp not in self._paused and tp in self._owned]
            if ready:
                self.resume(*ready)

    # -- inside ------------------------------------------------------------------------------

    def _seek(self, tp: TopicPartition, offset: int) -> None:
        self._seeks[tp] = self._seeks.get(tp, 0) + 1
        self._records.pop(tp, None)
        self._forget(tp)
        group = self.group

        def seek(consumer: Consumer) -> None:
            group.seek_applied(tp)
            consumer.seek(RdTopicPartition(tp.topic, tp.partition, offset))

        group.submit(seek)

    def _deliverable(self) -> bool:
        return any(tp not in self._paused for tp in self._records)

    def forget_waiting(self) -> None:
        """The tenant leaves: its records waiting no longer count against the group."""
        for tp in list(self._bytes):
            self._forget(tp)

    def _forget(self, tp: TopicPartition) -> None:
        self.budget.waiting -= self._bytes.pop(tp, 0)

    def _too_much_waiting(self) -> bool:
        waiting = sum(self._bytes.values())
        if waiting > self.max_bytes:
            return True
        return self.budget.over() and waiting > self.budget.fair_share()

    def _may_fetch_again(self) -> bool:
        waiting = sum(self._bytes.values())
        if waiting > self.max_bytes // 2:
            return False
        return not self.budget.over() or waiting <= self.budget.fair_share() // 2

    def _hold(self) -> None:
        """The partitions with records waiting paused in the group's consumer: librdkafka fetches
        none of them until `_release`, and reads on from after the last record it gave."""
        held = [tp for tp in self._records if tp not in self._held]
        if not held:
            return
        self._held.update(held)
        rd = [RdTopicPartition(tp.topic, tp.partition) for tp in held]
        self.group.submit(lambda consumer: consumer.pause(rd))
        self._holds += 1
        now = time.monotonic()
        if now - self._held_said_at >= HOLDS_SAID_EVERY_S:
            log.info(
                "%s: %d bytes wait for its pipeline (the group's tenants %d); partitions %s "
                "paused until it takes them (%d such pauses since last said)",
                self.topic,
                sum(self._bytes.values()),
                self.budget.waiting,
                sorted(tp.partition for tp in held),
                self._holds,
            )
            self._held_said_at, self._holds = now, 0

    def _release(self) -> None:
        """The held partitions fetched again, but for those the pipeline paused itself."""
        released = [tp for tp in self._held if tp not in self._paused]
        self._held.clear()
        if released:
            rd = [RdTopicPartition(tp.topic, tp.partition) for tp in released]
            self.group.submit(lambda consumer: consumer.resume(rd))

    async def _parked(self) -> None:
        """Until records it may take arrive, a wake, or PARKED_WAKE_S: one timer, no task."""
        if self._woken:
            self._woken = False
            return
        self._arrived.clear()
        progress = self.progress
        if progress is not None:
            progress.waiting = self._went_round
        timer = asyncio.get_running_loop().call_later(PARKED_WAKE_S, self._arrived.set)
        try:
            await self._arrived.wait()
        finally:
            timer.cancel()
            self._woken = False
            if progress is not None:
                progress.waiting = None

    def _went_round(self) -> float:
        return self.group.went_round


def _size(record: Record) -> int:
    return len(record.value or b"") + len(record.key or b"")


def _answer(
    reads: dict[TopicPartition, list[asyncio.Future[int | None]]],
    answers: dict[TopicPartition, Any] | None,
    error: BaseException | None,
) -> None:
    for tp, futures in reads.items():
        answer = error if answers is None else answers.get(tp, ConsumerCallFailed(f"no offset for {tp}"))
        for future in futures:
            if isinstance(answer, BaseException):
                settle(future, None, answer)
            else:
                settle(future, answer, None)
