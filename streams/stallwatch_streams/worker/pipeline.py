"""The consume loop and partitions changing hands; each partition is a task
(stallwatch_streams/worker/task.py) whose batches are committed by `commit`.

Fencing: each input partition has its own transactional id. A worker taking a partition over
starts a producer with that id, which aborts the previous owner's open transaction and makes
any later write of that owner fail, so a worker that was cut off and comes back cannot publish
over its successor: its fenced task is dropped and the group says whose the partition is
(`PartitionTask._fenced`, as Kafka Streams treats a `TaskMigratedException`). A failed
transaction otherwise rebuilds its partition's task and reads the batch again; one that keeps
failing, or any other error, ends the worker (see `service`), which restarts from what Kafka
committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from stallwatch.engine.detector import Detector
from stallwatch.engine.quota import RunQuota
from stallwatch.kafka.aiokafka_patch import Consumer
from stallwatch.kafka.options import aiokafka_options
from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker import producers, rebuild, store
from stallwatch_streams.worker.attempts import AttemptLog
from stallwatch_streams.worker.batch import LOG_APPEND_TIME, BatchApplier
from stallwatch_streams.worker.commit import AheadProducer, Applied, BatchCommitter, CommitTopics
from stallwatch_streams.worker.membership import SESSION_TIMEOUT_MS, Membership
from stallwatch_streams.worker.progress import Progress
from stallwatch_streams.worker.store import PartitionStates
from stallwatch_streams.worker.tallies import Tallies
from stallwatch_streams.worker.task import PartitionTask, ReadFrom
from stallwatch_streams.worker.task_context import PipelineConsumer, ProducerFactory, Restore, TaskContext
from stallwatch_streams.worker.tasks import PartitionTasks

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
# The held runs' gauges are counted at most this often, by the consume loop: a count walks every
# task, and a gauge is read once a scrape.
COUNT_INTERVAL_S = 1.0


class Pipeline(ConsumerRebalanceListener):
    """The consume loop of one worker process, a task per assigned partition. `consumer`,
    `start_producer` and `restore` are for the unit tests' fakes; by default, aiokafka's and the
    changelog's."""

    def __init__(
        self,
        settings: Settings,
        metrics: StallwatchMetrics,
        detector: Detector,
        consumer: PipelineConsumer | None = None,
        start_producer: ProducerFactory | None = None,
        restore: Restore | None = None,
        attempts: AttemptLog | None = None,
        ahead: AheadProducer | None = None,
        replace_ahead: Callable[[AheadProducer], Awaitable[AheadProducer]] | None = None,
        transaction_timeout_s: float = producers.TRANSACTION_TIMEOUT_MS / 1000,
        read_changelog: store.ReadChangelog = store.restore,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.progress = Progress()
        quota = RunQuota(
            settings.max_live_runs_per_tenant, settings.max_live_runs, settings.max_state_bytes_per_tenant
        )
        # The batch step without tallies, to rebuild runs from their events (their tallies were
        # counted when the events were first applied).
        rebuilder = BatchApplier(
            detector,
            settings.events_topic,
            tenant=settings.tenant,
            idle_timeout_s=settings.idle_timeout_s,
            ended_retention_s=settings.ended_retention_s,
        )

        async def restore_from_changelog(
            partitions: list[int], tick: Callable[[], None]
        ) -> dict[int, PartitionStates]:
            restored = await read_changelog(settings, partitions, tick, quota)
            outcome = await rebuild.rebuild_unreadable(settings, rebuilder, restored, tick)
            for rebuilt, left in outcome.values():
                metrics.unreadable_states.labels("rebuilt").inc(rebuilt)
                metrics.unreadable_states.labels("quarantined").inc(left)
            return restored

        self.committer = BatchCommitter(
            BatchApplier(
                detector,
                settings.events_topic,
                tenant=settings.tenant,
                tallies=Tallies(detector.secret, detector.admin_policy) if settings.tallies else None,
                idle_timeout_s=settings.idle_timeout_s,
                ended_retention_s=settings.ended_retention_s,
                deadletter_raw=settings.deadletter_raw,
            ),
            CommitTopics.of(settings),
            settings.group_id,
            transaction_timeout_s=transaction_timeout_s,
            group_offsets_interval_s=settings.group_offsets_interval_s,
            replace_ahead=(
                replace_ahead or (lambda broken: producers.replace_ahead_producer(settings, broken))
            )
            if settings.publish_ahead
            else None,
            off_loop_event_bytes=settings.off_loop_event_bytes,
            spent=metrics.apply_cpu.labels(settings.tenant or "shared").inc,
        )
        # Shared by the worker's tenants (the group model), else started with the pipeline.
        self.committer.ahead = ahead
        self._own_ahead = ahead is None
        self.membership = Membership(rejoin=lambda: self.consumer.request_rejoin())
        self.consumer: PipelineConsumer = consumer or Consumer(
            group_id=settings.group_id,
            group_instance_id=settings.instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_wait_ms=IDLE_FETCH_MAX_WAIT_MS,
            max_poll_records=FETCH_MAX_RECORDS,
            # Short sessions: a dead worker's partitions move to a live one in seconds. 6 s is the
            # broker's default group.min.session.timeout.ms.
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=2000,
            **aiokafka_options(settings),
        )
        self.tasks = PartitionTasks(
            TaskContext(
                settings,
                self.consumer,
                self.committer,
                self.membership,
                self.progress,
                metrics,
                start_producer or (lambda partition: producers.start_producer(settings, partition)),
                restore or restore_from_changelog,
                self._observe,
                attempts,
            )
        )
        self.progress.batches_since = self.tasks.batches_since
        # Live runs and fingerprints held, counted on the event loop for the metrics' thread, which
        # must not walk the states while a batch changes them.
        self.live_runs = 0
        self.fingerprints = 0
        self._counted_at = 0.0  # monotonic time of the last count
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
        """Let the batches in flight commit, then leave the group and close the tasks, all within
        `timeout_s`. False when a batch was abandoned (still waiting on the broker at half the
        time) or the rest did not finish in time. Not under the lock: a rebalance callback
        holding it may itself wait on a stuck batch."""
        deadline = time.monotonic() + timeout_s
        abandoned = await self.tasks.drain(timeout_s / 2)
        if abandoned:
            log.warning(
                "stopping: %d batches still waiting on the broker after %.1f s are "
                "abandoned; their events will be read again",
                abandoned,
                timeout_s / 2,
            )
        try:
            await self._cancel_safe_leave(max(0.0, deadline - time.monotonic()))
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning(
                "stopping: could not leave the group and close the producers in time "
                "(%r); the group will notice within its session timeout",
                exc,
            )
            return False
        return not abandoned

    async def _cancel_safe_leave(self, timeout_s: float) -> None:
        """`_leave` within `timeout_s`. With the broker away, aiokafka's consumer re-raises the
        cancellation of its own fetch task from `stop` (a traceback and exit 1 at a plain
        SIGTERM): that is its close failing, not this task being cancelled, and is said as such."""
        try:
            await asyncio.wait_for(self._leave(), timeout_s)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise OSError("the consumer's fetcher was cancelled while the broker was away") from None

    async def _leave(self) -> None:
        await self.consumer.stop()  # leaves the group: the partitions move at once
        # Under the lock: an assignment under way (a group model's view runs it in a task of its
        # own) ends before its tasks are closed, not with them gone from under it.
        async with self.membership.lock:
            await self.tasks.close()
        ahead, self.committer.ahead = self.committer.ahead, None
        if ahead is not None and self._own_ahead:
            await producers.stop_quietly(ahead)

    async def run(self) -> None:
        """Until cancelled; any failure (of a batch or of a rebalance) propagates and ends the
        worker."""
        membership, tasks = self.membership, self.tasks
        # The tasks whose attempts records still name a batch applied in memory. Their records
        # go idle in the next fetch's round of writes (a next batch's own record replaces one),
        # or at once when nothing more has arrived: one round trip a fetch, not two.
        applied: list[PartitionTask] = []
        while True:
            epochs = tasks.epochs()
            batches = await self.consumer.getmany(timeout_ms=0 if applied else FETCH_TIMEOUT_MS)
            if applied and not batches:
                async with membership.lock:
                    await self._mark([], applied)
                applied = []
                continue
            self._set_fetch_wait(bool(batches))
            failure = membership.failure
            if failure is not None:
                raise failure
            async with membership.lock:
                served = [
                    (tp, records, task)
                    for tp, records in batches.items()
                    if (task := tasks.get(tp.partition)) is not None and task.has_states
                ]
                admitted = []
                for tp, records, task in served:
                    epoch = epochs.get(tp.partition)
                    admission = task.admission(records[0].offset, epoch)
                    if isinstance(admission, ReadFrom):
                        self.consumer.seek(tp, admission.offset)
                    elif admission == "apply":
                        admitted.append((task, records, epoch))
                await self._mark([(task, records) for task, records, _ in admitted], applied)
                applied = []
                for task, records, epoch in admitted:
                    if records[0].timestamp_type == LOG_APPEND_TIME:
                        self.metrics.fetch_delay.observe(max(0.0, time.time() - records[0].timestamp / 1000))
                    await task.apply(records, epoch)
                    # The next batch is named before it comes, where the attempts log can post.
                    task.post_ahead()
                applied = [task for task, _, _ in admitted]
            self.progress.tick()
            if time.monotonic() - self._counted_at >= COUNT_INTERVAL_S:
                self._count()

    async def _mark(
        self, batches: list[tuple[PartitionTask, list[ConsumerRecord]]], applied: list[PartitionTask]
    ) -> None:
        """Each batch's first and last offsets written to the attempts, all at once, before any is
        applied (those of a careful task are written one by one as it applies them), unless the
        task's record posted ahead names them; in the same round, the records of the `applied`
        tasks that name no new batch made to name the offsets ahead, or idle (posted, with no
        wait, where the attempts log can)."""
        attempts = self.tasks.context.attempts
        if attempts is None:
            return
        writes: list[Awaitable[object]] = []
        marked: set[int] = set()
        for task, records in batches:
            attempt, first, last = task.attempt, records[0].offset, records[-1].offset
            if attempt is not None and not attempt.careful(first):
                # Named and landed already: no task, and no turn of the loop before the apply.
                if not task.landed_ahead(first, last):
                    writes.append(task.mark(first, last))
                marked.add(id(task))
        writes.extend(
            task.applied()
            for task in applied
            if id(task) not in marked and not task.post_ahead() and not task.post_idle()
        )
        if writes:
            await asyncio.gather(*writes)

    def _set_fetch_wait(self, fetched: bool) -> None:
        """Short fetches while busy, long ones once idle (IDLE_AFTER_S); set before the loop
        yields, so the fetch aiokafka builds next already has it."""
        now = time.monotonic()
        if fetched:
            self._busy_at = now
        busy = self.tasks.committing() or now - self._busy_at < IDLE_AFTER_S
        wait = FETCH_MAX_WAIT_MS if busy else IDLE_FETCH_MAX_WAIT_MS
        if wait != self._fetch_wait_ms:
            self.consumer.set_fetch_max_wait(wait)
            self._fetch_wait_ms = wait

    def _observe(self, tp: TopicPartition, batch: Applied) -> None:
        """A batch committed: its counts, and the seconds from its apply to its commit."""
        metrics, result, events = self.metrics, batch.result, batch.records
        seconds = time.perf_counter() - batch.started
        committed = time.time()
        metrics.count_events(result.events_by_type)
        for _, _, reason in result.letters:
            metrics.count_dead_letter(reason)
        metrics.skipped.inc(result.skipped)
        metrics.count_commands(result.commands)
        for tenant, observed in result.observed:
            metrics.count_observed(tenant, observed)
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
            metrics.set_lag(tp.topic, tp.partition, max(0, highwater - batch.last_offset - 1))

    def _count(self) -> None:
        self._counted_at = time.monotonic()
        self.live_runs = self.tasks.live_runs()
        self.fingerprints = self.tasks.fingerprints()
        self.metrics.state_bytes.labels(self.settings.tenant or "shared").set(self.tasks.state_bytes())

    # -- partitions changing hands -----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # Waits for the batches in flight to commit. The tasks keep their producers and states:
        # most come back in the assignment that follows, and one that went to another worker
        # was fenced by it, so nothing stale can be published from here.
        log.info(
            "rebalance: revoking partitions %s once their batches in flight committed",
            sorted(tp.partition for tp in revoked),
        )
        self.membership.revoking = True
        self.tasks.suspend()
        async with self.membership.lock:
            await self.tasks.settle()
            self.tasks.moved_on()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        try:
            await self._take_over(assigned)
        except store.UnreadablePosition as exc:
            # The operator's to act on: the consume loop raises it and the worker says it in one
            # line as it exits, without aiokafka's traceback of a failed listener first.
            self.membership.rebalance_failed(exc)
        except Exception as exc:
            self.membership.rebalance_failed(exc)
            raise

    async def _take_over(self, assigned: list[TopicPartition]) -> None:
        membership = self.membership
        membership.revoking = False
        async with membership.lock:
            await self.tasks.settle()
            self.progress.restoring = True
            # Every assigned task moves on: a fetch that returned while this callback awaited
            # (the consumer fetches from the group's offsets meanwhile) is read again from its
            # position.
            new = await self.tasks.assign(assigned)
            self._count()
            self.progress.restoring = False
            self.progress.served = True
            self.progress.tick()
            log.info(
                "serving partitions %s of %s (restored %s)",
                sorted(tp.partition for tp in assigned),
                self.settings.events_topic,
                new,
            )
