"""The Faust application: the events topic in, run states in a table, commands and dead letters out."""

from __future__ import annotations

import asyncio
import logging
import time

import faust
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from faust.sensors import Sensor
from faust.types import EventT
from stallwatch.streams.batch import BatchApplier, BatchResult, SourceMessage

from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.state import RunState
from stallwatch.kafka_config import aiokafka_options, ssl_context
from stallwatch.metrics import StallwatchMetrics
from stallwatch.settings import Settings

log = logging.getLogger("stallwatch.worker")

# Events handled per batch: commands of a batch are produced together and their acks awaited
# once, then each touched run's state is written once. Bigger batches raise throughput; the
# wait below bounds the latency a lone event pays for batching.
BATCH_MAX = 500
BATCH_WITHIN_S = 0.002
# Ended runs keep a tombstone (so late calls are refused, not allowed) for this long.
ENDED_RETENTION_S = 600.0


def is_expired(state: RunState, now: float, idle_timeout_s: float) -> bool:
    """An ended run's tombstone after ENDED_RETENTION_S, any other run after the idle timeout,
    both counted from its last event's time."""
    limit = ENDED_RETENTION_S if state.ended else idle_timeout_s
    return now - state.last_ts > limit


def credentials(settings: Settings) -> faust.types.auth.CredentialsT | None:
    context = ssl_context(settings)
    if settings.sasl_mechanism:
        return faust.SASLCredentials(username=settings.sasl_username, password=settings.sasl_password,
                                     mechanism=settings.sasl_mechanism, ssl_context=context)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class RecoverySensor(Sensor):
    """Faust reports each rebalance's start, and its end once tables are recovered: their
    distance is the time this worker's runs went unjudged."""

    def __init__(self, metrics: StallwatchMetrics, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.metrics = metrics

    def on_rebalance_end(self, app: faust.App, state: dict) -> None:
        self.metrics.recovery_seconds.observe(time.monotonic() - state["time_start"])


def build_app(settings: Settings, metrics: StallwatchMetrics, detector: Detector | None = None) -> faust.App:
    """A worker application; `faust.Worker(app).execute_from_commandline()` runs it."""
    app = faust.App(
        f"{settings.topic_prefix}-detector",
        broker=[f"kafka://{host}" for host in settings.bootstrap.split(",")],
        broker_credentials=credentials(settings),
        store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        # Short sessions: a dead worker's partitions move to a live one in seconds, not ~45 s.
        # 6 s is the broker's default group.min.session.timeout.ms.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=2.0,
        broker_commit_interval=1.0,
        producer_acks=-1,
        web_port=settings.web_port,
        web_bind="0.0.0.0",
        web_in_thread=False,
    )
    app.sensors.add(RecoverySensor(metrics))
    events = app.topic(settings.events_topic, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw", partitions=settings.partitions)
    runs = app.Table(
        "runs", key_type=bytes, value_type=bytes,  # bytes: Faust stores and recovers them raw
        partitions=settings.partitions,
        # Partition by key like the events, not by the batch's last event (batches mix partitions).
        use_partitioner=True,
        # Compacted only: retention must never delete a run's latest state (faust #651, #597).
        # Short segments and an eager cleaner keep the changelog near one record per run, so a
        # recovering worker reads little more than the live states.
        extra_topic_configs={"cleanup.policy": "compact", "segment.ms": "600000",
                             "min.cleanable.dirty.ratio": "0.1"},
    )
    changelog = runs.changelog_topic.get_topic_name()
    applier = BatchApplier(detector or Detector(settings.admin_policy()), settings.events_topic)

    # Deserialised states of this worker's runs; the table (bytes) stays the source of truth.
    # Cleared on every rebalance, since recovery may have rewritten the table.
    cache: dict[str, RunState] = {}

    def load(run_id: str) -> RunState | None:
        state = cache.get(run_id)
        if state is None:
            raw = runs.get(run_id.encode())
            state = RunState.from_bytes(raw) if raw else None
        return state

    async def forget_states(app: faust.App, partitions: object, **kwargs: object) -> None:
        cache.clear()

    app.on_partitions_revoked.connect(forget_states)
    app.on_partitions_assigned.connect(forget_states)

    # Concurrency 1: above it Faust can commit past an event still being processed (faust #606).
    @app.agent(events, concurrency=1)
    async def detect(stream: faust.StreamT) -> None:
        async for batch in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            try:
                await process(batch)
            except Exception as exc:
                # Fail fast: a restarted agent would go on after the lost batch, while a crashed
                # worker restarts from the committed offsets, which the state offsets make exact.
                cache.clear()
                log.exception("batch failed; stopping the worker")
                await app.crash(exc)
                raise

    async def process(batch: list[EventT]) -> None:
        started = time.perf_counter()
        messages = [SourceMessage(e.message.key, e.message.value, e.message.partition, e.message.offset)
                    for e in batch]
        result = applier.apply(messages, load)
        send = app.producer.send  # the producer itself: Faust's topic layer costs ~70 µs a message
        acks = [await send(settings.commands_topic, c.run_id.encode(), encode_command(c), None, None,
                           None) for c in result.commands]
        acks += [await send(settings.deadletter_topic, key, letter, None, None, None)
                 for key, letter, _ in result.letters]
        if acks:
            await asyncio.gather(*acks)
        # Only now, with every command acknowledged, may the states reach the changelog: a crash
        # before this point replays the batch and re-sends the same command ids.
        acked = time.time()
        # One changelog record per touched run, produced and awaited here rather than through
        # the table's setter: Faust queues those one by one behind a 100-message buffer that
        # stalls the stream when full. Awaiting them before the batch's events are acked keeps
        # source offsets from being committed ahead of the states they produced.
        writes = []
        for run_id, state in result.states.items():
            key, raw = run_id.encode(), state.to_bytes()
            runs.data[key] = raw  # the local store only; the record below is the changelog
            cache[run_id] = state
            writes.append(await send(changelog, key, raw, None, None, None))
        if writes:
            await asyncio.gather(*writes)
        observe(result, acked, len(batch), time.perf_counter() - started)

    def observe(result: BatchResult, acked: float, events: int, seconds: float) -> None:
        for kind, count in result.events_by_type.items():
            metrics.events.labels(kind).inc(count)
        for _, _, reason in result.letters:
            metrics.dead_letters.labels(reason).inc()
        metrics.skipped.inc(result.skipped)
        metrics.count_commands(result.commands)
        for caused_at in result.caused_at:
            metrics.decision_latency.observe(max(0.0, acked - caused_at))
        metrics.batch_seconds.observe(seconds)
        per_event = seconds / max(events, 1)
        for _ in range(events):
            metrics.event_seconds.observe(per_event)
        metrics.batch_events.observe(events)
        metrics.active_runs.set(len(runs))

    @app.timer(60.0)
    async def expire_idle_runs() -> None:
        """Drop abandoned runs after the idle timeout and ended runs' tombstones sooner."""
        now = time.time()
        expired = 0
        for n, (key, raw) in enumerate(list(runs.items())):
            if n % 1000 == 999:
                await asyncio.sleep(0)  # a big table must not hold up the events for long
            state = cache.get(key.decode()) or RunState.from_bytes(raw)
            if is_expired(state, now, settings.idle_timeout_s):
                del runs[key]
                cache.pop(key.decode(), None)
                expired += 1
        if expired:
            log.info("expired %d idle or ended runs", expired)

    lag_admin: list[AIOKafkaAdminClient] = []

    @app.timer(10.0)
    async def report_lag_and_size() -> None:
        """Consumer lag per assigned partition, and the fingerprints this worker holds. A metric
        must never take the worker down: a broker that does not answer skips this round."""
        metrics.fingerprints.set(sum(len(state.fingerprints) for state in cache.values()))
        assigned = [tp for tp in app.consumer.assignment() if tp.topic == settings.events_topic]
        if not assigned:
            return
        try:
            if not lag_admin:
                admin = AIOKafkaAdminClient(**aiokafka_options(settings))
                await admin.start()
                lag_admin.append(admin)
            committed = await lag_admin[0].list_consumer_group_offsets(app.conf.id)
            ends = await app.consumer.highwaters(*assigned)
        except Exception as exc:  # the broker may be away; Faust's own clients reconnect
            log.warning("consumer lag not measured this time: %s", exc)
            if lag_admin:
                await lag_admin.pop().close()
            return
        for tp in assigned:
            done = committed.get(TopicPartition(tp.topic, tp.partition))
            metrics.lag.labels(str(tp.partition)).set(ends[tp] - (done.offset if done else 0))

    return app
