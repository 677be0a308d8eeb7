"""The consume loop and partitions changing hands; each partition batch is committed by `commit`.

Fencing: each input partition has its own transactional id. A worker taking a partition over
starts a producer with that id, which aborts the previous owner's open transaction and makes
any later write of that owner fail, so a worker that was cut off and comes back cannot publish
over its successor (it raises ProducerFenced and exits; a fencing that may be the broker's
abort of a transaction past its timeout is the group's to judge, `_timed_out`). A failed
transaction otherwise rebuilds
its partition and reads the batch again (streams/worker/commit.py); one that keeps failing, or
any other error, ends the worker (see `service`), which restarts from what Kafka committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from stallwatch.engine.detector import Detector
from stallwatch.engine.quota import RunQuota
from stallwatch.kafka.options import aiokafka_options
from stallwatch.metrics import StallwatchMetrics
from stallwatch.settings import Settings
from streams.worker import producers
from streams.worker.aiokafka_patch import set_fetch_max_wait
from streams.worker.batch import LOG_APPEND_TIME, BatchApplier
from streams.worker.commit import Applied, BatchCommitter, CommitTopics, TransactionalProducer
from streams.worker.expiry import ExpiryScan
from streams.worker.inflight import InFlight
from streams.worker.progress import Progress
from streams.worker.store import RunStore
from streams.worker.tallies import Tallies

log = logging.getLogger(__name__)

# Records taken per fetch, over all partitions: a transaction's fixed cost (about five round
# trips) is shared by up to this many events.
FETCH_MAX_RECORDS = 4000
# How long an empty fetch waits; also the longest the loop goes without a heartbeat of progress.
FETCH_TIMEOUT_MS = 100
# The broker answers a fetch as soon as one record is there, or after this. A partition resumed
# (after a rebuild, or below its bound of pending records) joins the next fetch request, which
# waits for the one in flight: so this bounds how long its waiting events sit on the broker.
FETCH_MAX_WAIT_MS = 5
# ... but only while the worker is busy (a batch in flight, or records fetched within
# IDLE_AFTER_S). Idle, every partition is in the fetch, which the broker answers as soon as any
# record arrives, so a long wait costs no latency. At 5 ms all the time, an idle worker sent 200
# fetches a second and used ~9% of a core. The second of hysteresis keeps a steady trickle of
# events from flipping the wait at every batch (a long fetch built between two batches held the
# next batch's partition out for up to its whole wait).
IDLE_FETCH_MAX_WAIT_MS = 500
IDLE_AFTER_S = 1.0
# Retrying a call to a broker that is away: the first wait, doubled up to the last.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0
# The consumer group's session: a member silent this long is removed and its partitions move.
SESSION_TIMEOUT_MS = 6000
# How long a partition whose transaction timed out waits before it is rebuilt: a session
# timeout, within which a rebalance that gave it to a successor reaches this member by a
# heartbeat (rebuilding sooner could fence that successor).
GROUP_CONFIRM_S = SESSION_TIMEOUT_MS / 1000

ProducerFactory = Callable[[int], Awaitable[TransactionalProducer]]


class Pipeline(ConsumerRebalanceListener):
    """The consume loop of one worker process, with a transactional producer per partition.
    `consumer` and `start_producer` are for the unit tests' fakes; by default, aiokafka's."""

    def __init__(self, settings: Settings, metrics: StallwatchMetrics, detector: Detector,
                 consumer: AIOKafkaConsumer | None = None,
                 start_producer: ProducerFactory | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = RunStore(RunQuota(settings.max_live_runs_per_tenant, settings.max_live_runs))
        self.progress = Progress()
        self.producers: dict[int, TransactionalProducer] = {}
        self._start_producer = start_producer or (
            lambda partition: producers.start_producer(settings, partition))
        self.expiry = ExpiryScan(self.store, metrics, settings.idle_timeout_s,
                                 settings.ended_retention_s, settings.expiry_interval_s)
        self.committer = BatchCommitter(
            BatchApplier(detector, settings.events_topic, tenant=settings.tenant, tallies=Tallies(
                detector.secret, detector.admin_policy) if settings.tallies else None,
                idle_timeout_s=settings.idle_timeout_s,
                ended_retention_s=settings.ended_retention_s,
                deadletter_raw=settings.deadletter_raw),
            self.store, CommitTopics.of(settings),
            settings.group_id, self.producers, self.expiry.due, self._rebuild,
            metrics.batch_retries.inc, self._timed_out,
            producers.TRANSACTION_TIMEOUT_MS / 1000, settings.group_offsets_interval_s)
        # Held while batches are handed out and while partitions change hands; a rebalance first
        # waits for the batches in flight, so a partition is never given up half done.
        self._lock = asyncio.Lock()
        # Bumped at every assignment: records fetched before it may predate the new positions.
        self._generation = 0
        # An error inside a rebalance callback, which aiokafka would only log: the loop raises it,
        # since a partition assigned but not restored would be held and never served.
        self._failure: BaseException | None = None
        # Partitions dropped after a timed-out transaction, waiting for the group's word.
        self._confirming: set[asyncio.Task[None]] = set()
        # Between a revocation and the assignment that follows: the partitions may be another
        # member's already (this one was too slow to rejoin), so none is rebuilt meanwhile.
        self._revoking = False
        self.consumer = consumer or AIOKafkaConsumer(
            group_id=settings.group_id, group_instance_id=settings.instance_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            isolation_level="read_committed", fetch_max_wait_ms=IDLE_FETCH_MAX_WAIT_MS,
            max_poll_records=FETCH_MAX_RECORDS,
            # Short sessions: a dead worker's partitions move to a live one in seconds. 6 s is the
            # broker's default group.min.session.timeout.ms.
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=2000,
            **aiokafka_options(settings))
        self.in_flight = InFlight(self.consumer, self.progress, settings.commit_interval_s)
        # Runs held, counted on the event loop for the metrics' thread, which must not walk the
        # store while a batch changes it.
        self.runs_held = 0
        self._fetch_wait_ms = IDLE_FETCH_MAX_WAIT_MS
        self._busy_at = 0.0  # monotonic time of the last fetch that returned records

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self.settings.publish_ahead and self.committer.ahead is None:
            self.committer.ahead = await producers.start_ahead_producer(self.settings)
        self.consumer.subscribe([self.settings.events_topic], listener=self)
        await self.consumer.start()
        self.progress.tick()

    async def stop(self, timeout_s: float) -> bool:
        """Let the batches in flight commit, then leave the group and close the producers, all
        within `timeout_s`. False when a batch was abandoned (still waiting on the broker at half
        the time) or the rest did not finish in time. Not under the lock: a rebalance callback
        holding it may itself wait on a stuck batch."""
        deadline = time.monotonic() + timeout_s
        for task in list(self._confirming):
            task.cancel()
        abandoned = await self.in_flight.drain(timeout_s / 2)
        if abandoned:
            log.warning("stopping: %d batches still waiting on the broker after %.1f s are "
                        "abandoned; their events will be read again", abandoned, timeout_s / 2)
        try:
            await asyncio.wait_for(self._leave(), max(0.0, deadline - time.monotonic()))
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning("stopping: could not leave the group and close the producers in time "
                        "(%r); the group will notice within its session timeout", exc)
            return False
        return not abandoned

    async def _leave(self) -> None:
        await self.consumer.stop()  # leaves the group: the partitions move at once
        await self._close_producers(list(self.producers))
        ahead, self.committer.ahead = self.committer.ahead, None
        if ahead is not None:
            await producers.stop_quietly(ahead)

    async def run(self) -> None:
        """Until cancelled; any failure (of a batch or of a rebalance) propagates and ends the
        worker."""
        in_flight = self.in_flight
        while True:
            generation = self._generation
            epochs = dict(in_flight.epoch)
            batches = await self.consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS)
            self._set_fetch_wait(bool(batches))
            failure = self._failure or in_flight.failure
            if failure is not None:
                raise failure
            async with self._lock:
                owned = {tp: records for tp, records in batches.items() if self.store.owns(tp.partition)}
                for tp, records in owned.items():
                    partition = tp.partition
                    if generation != self._generation:
                        # Partitions changed hands while this batch was fetched, perhaps from the
                        # group's offset, which may lag: read on from the committed position
                        # (every batch applied before the rebalance has committed).
                        self.consumer.seek(tp, self.store.positions.get(partition,
                                                                        records[0].offset))
                    elif partition in in_flight:
                        pass  # being rebuilt: its rebuild seeks it to the committed position
                    elif in_flight.epoch.get(partition) != epochs.get(partition):
                        # Fetched before its partition's rebuild (from the failed batches' end):
                        # read on from where the rebuilt partition stands.
                        self.consumer.seek(tp, in_flight.next_offset.get(
                            partition, self.store.positions.get(partition, records[0].offset)))
                    else:
                        if records[0].timestamp_type == LOG_APPEND_TIME:
                            self.metrics.fetch_delay.observe(
                                max(0.0, time.time() - records[0].timestamp / 1000))
                        applied = await self.committer.apply(tp, records)
                        if self._rebuilt_meanwhile(tp, epochs):
                            continue
                        in_flight.add(tp, applied, self.committer.commit_applied,
                                      functools.partial(self._observe, tp))
            self.progress.tick()

    def _rebuilt_meanwhile(self, tp: TopicPartition, epochs: dict[int, int]) -> bool:
        """Whether the partition was rebuilt or dropped while a batch applied to it sent its
        commands (a commit of its earlier batches failed meanwhile): the batch was applied on
        states the rebuild discarded, so it is not committed. Its records are read again from
        where the rebuild seeks the partition, after this batch was fetched (a dropped partition
        is sought when it is rebuilt); its commands, sent already, are the same bytes."""
        partition = tp.partition
        return (self.in_flight.epoch.get(partition) != epochs.get(partition)
                or partition in self.in_flight or not self.store.owns(partition))

    def _set_fetch_wait(self, fetched: bool) -> None:
        """Short fetches while busy, long ones once idle (IDLE_AFTER_S); set before the loop
        yields, so the fetch aiokafka builds next already has it."""
        now = time.monotonic()
        if fetched:
            self._busy_at = now
        busy = bool(self.in_flight) or now - self._busy_at < IDLE_AFTER_S
        wait = FETCH_MAX_WAIT_MS if busy else IDLE_FETCH_MAX_WAIT_MS
        if wait != self._fetch_wait_ms:
            set_fetch_max_wait(self.consumer, wait)
            self._fetch_wait_ms = wait

    async def _timed_out(self, tp: TopicPartition) -> None:
        """The broker aborted the transaction for its age (the broker, or the link to it, stalled
        past the transaction timeout) and bumped the producer's epoch, which reads as a fencing.
        Only the group can tell whether a successor took the partition meanwhile, and a rebuild
        now (a new producer under the same id) would fence that successor. So the partition is
        dropped (its producer, its states; it stays paused) and rebuilt once the group has had a
        session timeout to say otherwise: a rebalance that moved it reaches this member by its
        next heartbeat, and the assignment that follows rebuilds or forgets it."""
        partition = tp.partition
        log.warning("partition %d: its transaction outlived the transaction timeout (%d ms) and "
                    "the broker aborted it; rebuilding the partition unless the group moved it",
                    partition, producers.TRANSACTION_TIMEOUT_MS)
        self.metrics.batch_retries.inc()
        self.in_flight.rebuilding(tp)
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
                await self._rebuild(tp)  # resumes it (`InFlight.rebuilt`)
            finally:
                self.progress.batches_since.pop(tp.partition, None)

    def _confirmed(self, task: asyncio.Task[None]) -> None:
        self._confirming.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._failure = self._failure or task.exception()

    async def _rebuild(self, tp: TopicPartition) -> None:
        """A new producer under the partition's transactional id (aborting our own open
        transaction), its states and its position as last committed. During a rebalance the
        partition is dropped instead, and the assignment that follows restores it or lets it go:
        a new producer started now could fence the member the group gave it to meanwhile (a
        three-node cluster showed both workers fenced at their first rebalance)."""
        partition = tp.partition
        self.in_flight.rebuilding(tp)
        await self._close_producers([partition])
        if self._revoking:
            log.info("partition %d: its transaction failed during a rebalance; the assignment "
                     "that follows restores it or gives it away", partition)
            self.store.drop(partition)
            return
        self.producers[partition] = await _until_done(lambda: self._start_producer(partition))
        await _until_done(lambda: self.store.restore(self.settings, [partition], self.progress.tick))
        self.in_flight.rebuilt(tp, await self._seek_to_position(tp))

    async def _seek_to_position(self, tp: TopicPartition) -> int | None:
        """The position its changelog holds, which the same commits as its states wrote; else (no
        batch committed since positions were written) the group's offset, else the beginning
        (None: the offset is not known here)."""
        position = self.store.positions.get(tp.partition)
        if position is None:
            position = await _until_done(lambda: self.consumer.committed(tp))
        if position is None:
            await self.consumer.seek_to_beginning(tp)
        else:
            self.consumer.seek(tp, position)
        return position

    def _observe(self, tp: TopicPartition, batch: Applied) -> None:
        """A batch committed: its counts, and the seconds from its apply to its commit."""
        metrics, result, events = self.metrics, batch.result, batch.records
        self.runs_held = len(self.store)
        seconds = time.perf_counter() - batch.started
        committed = time.time()
        for kind, count in result.events_by_type.items():
            metrics.events.labels(kind).inc(count)
        for _, _, reason in result.letters:
            metrics.dead_letters.labels(reason).inc()
        metrics.skipped.inc(result.skipped)
        metrics.count_commands(result.commands)
        published = result.published_at or committed  # the commands' acks, or the commit's
        for caused_at in result.caused_at:
            metrics.decision_latency.observe(max(0.0, published - caused_at))
        metrics.batch_seconds.observe(seconds)
        per_event = seconds / events
        for _ in range(events):
            metrics.event_seconds.observe(per_event)
        metrics.batch_events.observe(events)
        highwater = self.consumer.highwater(tp)
        if highwater is not None:
            metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, highwater - batch.last_offset - 1))

    # -- partitions changing hands -----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # Waits for the batches in flight to commit. The partitions' producers and states are
        # kept: most come back in the assignment that follows, and one that went to another
        # worker was fenced by it, so nothing stale can be published from here.
        log.info("rebalance: revoking partitions %s once their batches in flight committed",
                 sorted(tp.partition for tp in revoked))
        self._revoking = True
        async with self._lock:
            self._generation += 1
            await self.in_flight.settle()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        try:
            await self._take_over(assigned)
        except Exception as exc:
            self._failure = exc
            raise

    async def _take_over(self, assigned: list[TopicPartition]) -> None:
        self._revoking = False
        async with self._lock:
            self._generation += 1
            await self.in_flight.settle()
            owned = {tp.partition for tp in assigned}
            # Those held without a producer too (dropped during the rebalance or after a
            # timed-out transaction) that the group gave away.
            lost = [p for p in {*self.producers, *self.in_flight.held} if p not in owned]
            await self._close_producers(lost)
            for partition in lost:
                self.in_flight.forget(partition)
                self.store.drop(partition)
                self.expiry.forget(partition)
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(self.settings.events_topic, str(partition))
            new = sorted(owned - set(self.producers))
            self.in_flight.held.difference_update(new)  # rebuilt here if held after a timeout
            self.progress.restoring = True
            # Fence first: starting the producer aborts the previous owner's open transaction, so
            # the changelog read next is final and no zombie can write after it.
            for partition in new:
                self.producers[partition] = await self._start_producer(partition)
            if new:
                seconds = await self.store.restore(self.settings, new, self.progress.tick)
                self.metrics.recovery_seconds.observe(seconds)
            # Every partition with a committed position, kept ones too: the consumer set them to
            # the group's offsets, which may lag (group_offsets_interval_s). No I/O here: a slow
            # callback misses the group's rebalance and is thrown out of the group. A partition
            # with no position yet starts where the consumer put it (the group's offset, else
            # the beginning), as a partition did before positions were written.
            for tp in assigned:
                position = self.store.positions.get(tp.partition)
                if position is not None:
                    self.consumer.seek(tp, position)
            # Again at the end: a fetch that returned while this callback awaited (the consumer
            # fetches from the group's offsets meanwhile) is then read again from the position.
            self._generation += 1
            self.runs_held = len(self.store)
            self.progress.restoring = False
            self.progress.tick()
            log.info("serving partitions %s of %s (restored %s)", sorted(owned),
                     self.settings.events_topic, new)

    async def _close_producers(self, partitions: list[int]) -> None:
        for partition in partitions:
            producer = self.producers.pop(partition, None)
            if producer is not None:
                await producers.stop_quietly(producer)


T = TypeVar("T")


async def _until_done(attempt: Callable[[], Awaitable[T]]) -> T:
    """Retry a call while the broker is away (connection refused, timeouts); a worker waiting
    here makes no progress, so the stall timeout still bounds it."""
    wait, failures, since = RETRY_FIRST_S, 0, time.monotonic()
    while True:
        try:
            result = await attempt()
        except ProducerFenced:
            raise
        except (KafkaError, OSError) as exc:
            # One line when it starts and one when it ends: a 30 s outage retried every 5 s
            # would otherwise add a line per attempt to the folded Kafka summary.
            failures += 1
            say = log.warning if failures == 1 else log.debug
            say("the broker did not answer (%r); trying again every %.0f s at most", exc, RETRY_MAX_S)
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_MAX_S)
            continue
        if failures:
            log.info("the broker answered after %d attempts in %.0f s", failures + 1,
                     time.monotonic() - since)
        return result
