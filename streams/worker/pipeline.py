"""Consume, apply, produce, commit: each partition's batch is one Kafka transaction.

The invariant, in one place: a batch's commands, dead letters, changed run states (changelog)
and the input offset after it are written in ONE transaction of the partition's own producer.
Either all of it is visible to read-committed readers, or none of it is and the batch is read
again from the last committed offset. Nothing is acknowledged that was not applied and
published, and no decision is published twice.

Fencing: each input partition has its own transactional id. A worker taking a partition over
starts a producer with that id, which aborts the previous owner's open transaction and makes
any later write of that owner fail, so a worker that was cut off and comes back cannot publish
over its successor. Any failure of a transaction crashes the worker (see `service`): the process
restarts from the committed state instead of going on past a lost batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import aiokafka.producer.sender
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import ConsumerRecord

from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import is_expired
from stallwatch.kafka.options import aiokafka_options
from stallwatch.metrics import StallwatchMetrics
from stallwatch.settings import Settings
from streams.worker.batch import BatchApplier, BatchResult
from streams.worker.store import RunStore

log = logging.getLogger(__name__)

# Records taken per fetch, over all partitions: a transaction's fixed cost (about five round
# trips) is shared by up to this many events.
FETCH_MAX_RECORDS = 4000
# How long an empty fetch waits; also the longest the loop goes without a heartbeat of progress.
FETCH_TIMEOUT_MS = 100
# The broker answers a fetch as soon as one record is there, or after this. A partition resumed
# after its transaction joins the next fetch request, which waits for the one in flight: so this
# bounds how long a resumed partition's waiting events sit on the broker.
FETCH_MAX_WAIT_MS = 5
# ... but only while a batch is in flight: with no partition paused, every partition is in the
# fetch, which the broker answers as soon as any record arrives, so a long wait costs no latency.
# At 5 ms all the time, an idle worker sent 200 fetches a second and used ~9% of a core.
IDLE_FETCH_MAX_WAIT_MS = 500
# A new transaction's first write is refused (CONCURRENT_TRANSACTIONS) until the broker has written
# the previous one's commit markers, and aiokafka retries after a fixed 20 ms: measured, that was
# 23 ms of every back-to-back transaction. The markers take ~1-5 ms on a local broker.
aiokafka.producer.sender.BACKOFF_OVERRIDE = 0.002
# Other retries of the transactional producer back off this long: the same refusal met by the
# offsets later in a transaction (at 10 ms, the decision latency's p50 was
# 21-29 ms; at 2-5 ms, 15-17 ms), and coordinator moves, where a few ms keep the retries sparse.
RETRY_BACKOFF_MS = 5
# A partition whose batch failed this many times in a row (each time rebuilt from Kafka and read
# again) ends the worker: a failure that repeats is not the broker coming back.
MAX_BATCH_FAILURES = 5
# Retrying a call to a broker that is away: the first wait, doubled up to the last.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0
# A transaction's coordinator aborts it when its producer goes silent this long: a worker that
# dies mid-batch holds back its partitions' read-committed readers at most this long (a
# successor's fencing aborts it sooner).
TRANSACTION_TIMEOUT_MS = 15_000
# The consumer group's session: a member silent this long is removed and its partitions move.
SESSION_TIMEOUT_MS = 6000
# How long a partition whose transaction timed out waits before it is rebuilt: a session
# timeout, within which a rebalance that gave it to a successor reaches this member by a
# heartbeat (rebuilding sooner could fence that successor).
GROUP_CONFIRM_S = SESSION_TIMEOUT_MS / 1000


@dataclass
class Progress:
    """When the loop last went round, when each batch in flight began, and whether the worker
    can answer yet."""

    beat: float = 0.0
    restoring: bool = True
    batches_since: dict[int, float] = field(default_factory=dict)  # partition -> start of its batch

    def tick(self) -> None:
        self.beat = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the oldest sign of progress: a loop that goes round while one
        partition's batch hangs is stalled all the same."""
        oldest = min([self.beat, *self.batches_since.values()])
        return time.monotonic() - oldest


class Pipeline(ConsumerRebalanceListener):
    """The consume loop of one worker process, with a transactional producer per partition."""

    def __init__(self, settings: Settings, metrics: StallwatchMetrics, detector: Detector) -> None:
        self.settings = settings
        self.metrics = metrics
        self.applier = BatchApplier(detector, settings.events_topic)
        self.store = RunStore()
        self.progress = Progress()
        self.producers: dict[int, AIOKafkaProducer] = {}
        self._expired_at: dict[int, float] = {}
        self._fingerprints: dict[int, int] = {}  # partition -> fingerprints held at its last scan
        # Held while batches are handed out and while partitions change hands; a rebalance first
        # waits for the batches in flight, so a partition is never given up half done.
        self._lock = asyncio.Lock()
        # Bumped at every assignment: records fetched before it may predate the new positions.
        self._generation = 0
        self._in_flight: dict[int, asyncio.Task[None]] = {}  # partition -> its batch's task
        self._failures: dict[int, int] = {}  # partition -> its batches failed in a row
        # An error inside a rebalance callback, which aiokafka would only log: the loop raises it,
        # since a partition assigned but not restored would be held and never served.
        self._failure: BaseException | None = None
        # Partitions dropped after a timed-out transaction, waiting for the group's word.
        self._confirming: set[asyncio.Task[None]] = set()
        self._stopping = False  # set by `stop`: a batch cancelled from then on is abandoned
        self.consumer = AIOKafkaConsumer(
            group_id=settings.group_id, group_instance_id=settings.instance_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            isolation_level="read_committed", fetch_max_wait_ms=IDLE_FETCH_MAX_WAIT_MS,
            max_poll_records=FETCH_MAX_RECORDS,
            # Short sessions: a dead worker's partitions move to a live one in seconds. 6 s is the
            # broker's default group.min.session.timeout.ms.
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=2000,
            **aiokafka_options(settings))

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.consumer.subscribe([self.settings.events_topic], listener=self)
        await self.consumer.start()
        self.progress.tick()

    async def stop(self, timeout_s: float) -> bool:
        """Let the batches in flight commit, then leave the group and close the producers, all
        within `timeout_s`. False when a batch was abandoned: still waiting on the broker at
        half the time, it is cancelled (nothing of it is visible; its events are read again).
        Not under the lock: a rebalance callback holding it may itself wait on a stuck batch."""
        deadline = time.monotonic() + timeout_s
        self._stopping = True
        for task in list(self._confirming):
            task.cancel()
        batches = list(self._in_flight.values())
        _, stuck = await asyncio.wait(batches, timeout=timeout_s / 2) if batches else (set(), set())
        for task in stuck:
            task.cancel()
        if stuck:
            log.warning("stopping: %d batches still waiting on the broker after %.1f s are "
                        "abandoned; their events will be read again", len(stuck), timeout_s / 2)
        try:
            await asyncio.wait_for(self._leave(), max(0.0, deadline - time.monotonic()))
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning("stopping: could not leave the group and close the producers in time "
                        "(%r); the group will notice within its session timeout", exc)
            return False
        return not stuck

    async def _leave(self) -> None:
        await self.consumer.stop()  # leaves the group: the partitions move at once
        await self._close_producers(list(self.producers))

    async def run(self) -> None:
        """Until cancelled; any failure propagates and ends the worker.

        Each partition has at most one batch in flight, as its own task, and is paused meanwhile:
        a partition's events wait only for its own previous transaction, never for another's.
        """
        while True:
            generation = self._generation
            batches = await self.consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS)
            if self._failure is not None:
                raise self._failure
            async with self._lock:
                owned = {tp: records for tp, records in batches.items() if self.store.owns(tp.partition)}
                if generation != self._generation:
                    # Partitions changed hands while this batch was fetched: read it again from
                    # its first record, in the new assignment's order of things.
                    for tp, records in owned.items():
                        self.consumer.seek(tp, records[0].offset)
                else:
                    for tp, records in owned.items():
                        if tp.partition in self._in_flight:  # fetched just before its pause
                            self.consumer.seek(tp, records[0].offset)
                        else:
                            self._dispatch(tp, records)
            self.progress.tick()

    def _dispatch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        self.consumer.pause(tp)
        self.progress.batches_since[tp.partition] = time.monotonic()
        task = asyncio.create_task(self._commit_batch(tp, records), name=f"batch-{tp.partition}")
        self._in_flight[tp.partition] = task
        task.add_done_callback(lambda done: self._batch_done(tp, done))
        self._set_fetch_wait()

    def _batch_done(self, tp: TopicPartition, task: asyncio.Task[None]) -> None:
        if self._in_flight.get(tp.partition) is task:
            del self._in_flight[tp.partition]
            self.progress.batches_since.pop(tp.partition, None)
        if task.cancelled():
            # Abandoned by a stop: nothing failed. Cancelled otherwise (a rebalance callback
            # cancelled while it waited for it), its commit may have landed unseen by the store.
            if not self._stopping:
                self._failure = self._failure or asyncio.CancelledError()
            return
        if task.exception() is not None:
            self._failure = self._failure or task.exception()
            return
        self._set_fetch_wait()
        # A partition dropped after a timed-out transaction stays paused until rebuilt.
        if tp in self.consumer.assignment() and self.store.owns(tp.partition):
            self.consumer.resume(tp)

    def _set_fetch_wait(self) -> None:
        """Short fetches while a batch is in flight (a partition resumed after its transaction
        waits for the fetch then in flight, which does not include it), long ones otherwise.
        aiokafka reads the value at each fetch it builds; it has no public setter."""
        fetcher = getattr(self.consumer, "_fetcher", None)
        if fetcher is not None:
            fetcher._fetch_max_wait_ms = (FETCH_MAX_WAIT_MS if self._in_flight
                                          else IDLE_FETCH_MAX_WAIT_MS)

    async def _settle(self) -> None:
        """Wait for every batch in flight to commit (or fail: the loop then raises)."""
        if self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    # -- one partition's batch ---------------------------------------------------------------

    async def _commit_batch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        """The batch in one transaction. If the transaction fails (the broker went away, a
        leader moved), nothing of it is visible: the partition is rebuilt from what Kafka
        committed and the batch read again. A fenced producer, or a batch that keeps failing,
        ends the worker; a transaction that outlived the transaction timeout, which the broker
        reports as a fencing, is the group's to judge (`_timed_out`)."""
        began = time.monotonic()
        try:
            await self._transact(tp, records)
            self._failures.pop(tp.partition, None)
        except ProducerFenced:
            # Younger than the timeout (on this clock, which started it before the broker's),
            # the transaction cannot have been aborted for its age: a successor fenced it.
            if time.monotonic() - began < TRANSACTION_TIMEOUT_MS / 1000:
                raise
            await self._timed_out(tp)
        except KafkaError as exc:
            failures = self._failures[tp.partition] = self._failures.get(tp.partition, 0) + 1
            if failures > MAX_BATCH_FAILURES:
                raise
            log.warning("partition %d: the batch's transaction failed (%r), attempt %d; rebuilding "
                        "the partition from what Kafka committed", tp.partition, exc, failures)
            self.metrics.batch_retries.inc()
            await self._rebuild(tp)

    async def _timed_out(self, tp: TopicPartition) -> None:
        """The broker aborted the transaction for its age (the broker, or the link to it, stalled
        past the transaction timeout) and bumped the producer's epoch, which reads as a fencing.
        Only the group can tell whether a successor took the partition meanwhile, and a
        rebuild now (a new producer under the same id) would fence that successor. So the
        partition is dropped (its producer, its states; it stays paused) and rebuilt once the
        group has had a session timeout to say otherwise: a rebalance that moved it reaches this
        member by its next heartbeat, and the assignment that follows rebuilds or forgets it."""
        partition = tp.partition
        log.warning("partition %d: its transaction outlived the transaction timeout (%d ms) and "
                    "the broker aborted it; rebuilding the partition unless the group moved it",
                    partition, TRANSACTION_TIMEOUT_MS)
        self.metrics.batch_retries.inc()
        await self._close_producers([partition])
        self.store.drop(partition)
        task = asyncio.create_task(self._rebuild_if_still_ours(tp, self._generation),
                                   name=f"confirm-{partition}")
        self._confirming.add(task)
        task.add_done_callback(self._confirmed)

    async def _rebuild_if_still_ours(self, tp: TopicPartition, generation: int) -> None:
        await asyncio.sleep(GROUP_CONFIRM_S)
        async with self._lock:
            if (generation != self._generation or tp not in self.consumer.assignment()
                    or tp.partition in self.producers):
                return  # the group spoke: the assignment that followed rebuilt or forgot it
            log.info("partition %d: still this worker's after %.0f s; rebuilding it",
                     tp.partition, GROUP_CONFIRM_S)
            self.progress.batches_since[tp.partition] = time.monotonic()
            try:
                await self._rebuild(tp)
            finally:
                self.progress.batches_since.pop(tp.partition, None)
            self.consumer.resume(tp)

    def _confirmed(self, task: asyncio.Task[None]) -> None:
        self._confirming.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._failure = self._failure or task.exception()

    async def _rebuild(self, tp: TopicPartition) -> None:
        """A new producer under the partition's transactional id (aborting our own open
        transaction), its states and its offset as last committed."""
        partition = tp.partition
        await self._close_producers([partition])
        self.producers[partition] = await _until_done(lambda: self._start_producer(partition))
        await _until_done(lambda: self.store.restore(self.settings, [partition], self.progress.tick))
        committed = await _until_done(lambda: self.consumer.committed(tp))
        if committed is None:
            await self.consumer.seek_to_beginning(tp)
        else:
            self.consumer.seek(tp, committed)

    async def _transact(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        started = time.perf_counter()
        partition = tp.partition
        result = self.applier.apply(records, lambda run_id: self.store.load(partition, run_id),
                                    self.store.clocks[partition], time.time())
        expired = self._expired_runs(partition)
        producer = self.producers[partition]
        settings = self.settings
        async with producer.transaction():
            sent = [await producer.send(settings.commands_topic, encode_command(c),
                                        key=c.run_id.encode(), partition=partition)
                    for c in result.commands]
            sent += [await producer.send(settings.deadletter_topic, letter, key=key, partition=partition)
                     for key, letter, _ in result.letters]
            sent += [await producer.send(settings.changelog_topic, state.to_bytes(),
                                         key=run_id.encode(), partition=partition)
                     for run_id, state in result.states.items()]
            sent += [await producer.send(settings.changelog_topic, None, key=run_id.encode(),
                                         partition=partition) for run_id in expired]
            # The offsets only once the records are acknowledged: adding the offsets to the
            # transaction (AddOffsetsToTxn) changes its state on the coordinator, and a record
            # whose verification (KIP-890) meets that change is refused as NOT_ENOUGH_REPLICAS
            # and retried: ~16 warnings a second on a healthy broker, for no gain in latency.
            await asyncio.gather(*sent)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1},
                                                       settings.group_id)
        # Committed: only now does the store take the batch's states.
        for run_id, state in result.states.items():
            self.store.put(partition, run_id, state)
        for run_id in expired:
            self.store.delete(partition, run_id)
        self._observe(tp, records, result, time.perf_counter() - started)

    def _expired_runs(self, partition: int) -> list[str]:
        """Runs idle (or ended) too long by the partition's event time, scanned once an interval."""
        now = time.monotonic()
        if now - self._expired_at.setdefault(partition, now) < self.settings.expiry_interval_s:
            return []
        self._expired_at[partition] = now
        states = list(self.store.states(partition))  # decoding them moves the clock to theirs
        clock = self.store.clocks[partition]
        newest = clock.newest
        if newest is None:
            return []
        for _, state in states:
            clock.place(state)
        expired = [run_id for run_id, state in states
                   if is_expired(state, newest, self.settings.idle_timeout_s,
                                 self.settings.ended_retention_s)]
        # Counted from the states this scan decoded anyway, one partition at a time.
        self._fingerprints[partition] = sum(len(state.fingerprints) for _, state in states)
        self.metrics.fingerprints.set(sum(self._fingerprints.values()))
        if expired:
            log.info("expiring %d idle or ended runs of partition %d", len(expired), partition)
        return expired

    def _observe(self, tp: TopicPartition, records: list[ConsumerRecord], result: BatchResult,
                 seconds: float) -> None:
        metrics = self.metrics
        committed = time.time()
        for kind, count in result.events_by_type.items():
            metrics.events.labels(kind).inc(count)
        for _, _, reason in result.letters:
            metrics.dead_letters.labels(reason).inc()
        metrics.skipped.inc(result.skipped)
        metrics.count_commands(result.commands)
        for caused_at in result.caused_at:
            metrics.decision_latency.observe(max(0.0, committed - caused_at))
        metrics.batch_seconds.observe(seconds)
        per_event = seconds / len(records)
        for _ in records:
            metrics.event_seconds.observe(per_event)
        metrics.batch_events.observe(len(records))
        metrics.active_runs.set(len(self.store))
        highwater = self.consumer.highwater(tp)
        if highwater is not None:
            metrics.lag.labels(str(tp.partition)).set(max(0, highwater - records[-1].offset - 1))

    # -- partitions changing hands -----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # Waits for the batches in flight to commit. The partitions' producers and states are
        # kept: most come back in the assignment that follows, and one that went to another
        # worker was fenced by it, so nothing stale can be published from here.
        async with self._lock:
            self._generation += 1
            await self._settle()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        try:
            await self._take_over(assigned)
        except Exception as exc:
            self._failure = exc
            raise

    async def _take_over(self, assigned: list[TopicPartition]) -> None:
        async with self._lock:
            self._generation += 1
            await self._settle()
            owned = {tp.partition for tp in assigned}
            lost = [p for p in self.producers if p not in owned]
            await self._close_producers(lost)
            for partition in lost:
                self.store.drop(partition)
                self._expired_at.pop(partition, None)
                self._fingerprints.pop(partition, None)
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(str(partition))
            new = sorted(owned - set(self.producers))
            self.progress.restoring = True
            # Fence first: starting the producer aborts the previous owner's open transaction, so
            # the changelog read next is final and no zombie can write after it.
            for partition in new:
                self.producers[partition] = await self._start_producer(partition)
            if new:
                seconds = await self.store.restore(self.settings, new, self.progress.tick)
                self.metrics.recovery_seconds.observe(seconds)
            self.metrics.active_runs.set(len(self.store))
            self.progress.restoring = False
            self.progress.tick()
            log.info("serving partitions %s (restored %s)", sorted(owned), new)

    async def _start_producer(self, partition: int) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            transactional_id=f"{self.settings.group_id}-{self.settings.events_topic}-{partition}",
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, linger_ms=0,
            retry_backoff_ms=RETRY_BACKOFF_MS,
            **aiokafka_options(self.settings))
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return producer

    async def _close_producers(self, partitions: list[int]) -> None:
        for partition in partitions:
            producer = self.producers.pop(partition, None)
            if producer is not None:
                with contextlib.suppress(Exception):  # a fenced producer may refuse to close cleanly
                    await producer.stop()


T = TypeVar("T")


async def _until_done(attempt: Callable[[], Awaitable[T]]) -> T:
    """Retry a call while the broker is away (connection refused, timeouts); a worker waiting
    here makes no progress, so the stall timeout still bounds it."""
    wait = RETRY_FIRST_S
    while True:
        try:
            return await attempt()
        except ProducerFenced:
            raise
        except (KafkaError, OSError) as exc:
            log.warning("the broker did not answer (%r); again in %.1f s", exc, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_MAX_S)
