"""The client for agent runtimes on Kafka: events out, only its own runs' command partitions in.

It fails open: when the broker cannot be reached, every call is allowed at once (within the
verdict timeout), the log says so once, and the client reconnects in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from stallwatch.client.run import Client
from stallwatch.contract.commands import decode_command
from stallwatch.engine.canonical import secret_from_key
from stallwatch.kafka.aiokafka_patch import Consumer, Producer
from stallwatch.kafka.options import aiokafka_options
from stallwatch.logs import tame_kafka_loggers
from stallwatch.settings import Settings, reveal

log = logging.getLogger(__name__)

# How long a runtime waits for a verdict before it runs the call anyway (failing open).
DEFAULT_VERDICT_TIMEOUT_S = 5.0
# Waits between reconnection attempts while the broker is away, doubling up to the second:
# a returning broker is found within seconds without hammering one that stays away.
_RETRY_FIRST_S = 0.5
_RETRY_MAX_S = 5.0
# Topics created a moment ago (the worker's or the demo's first start) take a few hundred ms to
# reach the broker's metadata: looking a few times first keeps a healthy start-up from reporting
# them missing (and failing open) for a retry interval.
_TOPIC_CHECKS, _TOPIC_CHECK_WAIT_S = 4, 0.25
# Stopping a producer or consumer whose broker is gone must not hold up the runtime.
_CLOSE_TIMEOUT_S = 2.0
# What the broker being away looks like: aiokafka's errors, refused sockets, timeouts.
_UNREACHABLE = (KafkaError, OSError, TimeoutError)


class KafkaClient(Client):
    """Publishes a runtime's events keyed by run id and reads the commands of its runs.

    The consumer is assigned only the commands partitions the client's runs hash to (same key,
    same partitioner, same partition count as the events), so a fleet of runtimes does not each
    read the whole commands topic.
    """

    def __init__(
        self, settings: Settings | None = None, verdict_timeout_s: float = DEFAULT_VERDICT_TIMEOUT_S
    ) -> None:
        super().__init__()
        self.settings = settings or Settings.from_env()
        self.verdict_timeout_s = verdict_timeout_s
        self.fingerprint_secret = secret_from_key(reveal(self.settings.fingerprint_key))
        self.args_digest_only = self.settings.args_digest_only
        # A send takes at most half the verdict timeout, so that sending and waiting for the
        # verdict together stay within it.
        self._send_timeout_s = verdict_timeout_s / 2
        self._partitioner = DefaultPartitioner()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[int] = []
        self._assigned: set[TopicPartition] = set()
        # Partitions whose leader does not answer while others do: their runs fail open alone.
        self._stalled: set[int] = set()
        self._assign_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._reconnector: asyncio.Task[None] | None = None
        self.connected = False  # True while the broker answers
        self._failing_open = False  # set once per outage, so the log says so once
        self._why_not = "cannot reach the broker at start"  # the last failed connection's cause

    def health(self) -> dict[str, Any]:
        """Whether verdicts come: the broker reached, and the last call answered by a worker (a
        call that timed out was allowed: no worker judges, or none keeps up)."""
        coming = self.verdicts.coming
        if not self.connected:
            said = "failing open: no broker answers (every call is allowed)"
        elif coming is False:
            said = (
                f"failing open: the last call got no verdict within {self.verdict_timeout_s:g} s "
                "(no worker serves its partition, or none keeps up)"
            )
        elif coming is None:
            said = "no call asked yet"
        else:
            said = "arriving"
        return {
            "broker": "connected" if self.connected else "unreachable",
            "verdicts": said,
            "answered": self.verdicts.answered,
            "timed_out": self.verdicts.timed_out,
        }

    def observes(self, tenant: str | None) -> bool:
        settings = self.settings
        tenant = tenant or settings.tenant
        return settings.observe_only or (tenant is not None and tenant in settings.observe_only_tenants)

    async def start(self) -> None:
        """Connect; when the broker cannot be reached, fail open and keep trying in the background."""
        tame_kafka_loggers()  # aiokafka's retries in an outage: a few lines, not hundreds
        if not await self._connect():
            await self._lose(self._why_not)

    async def stop(self) -> None:
        for task in (self._reconnector, self._reader):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._reconnector = self._reader = None
        await self._close()

    async def __aenter__(self) -> KafkaClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- connection ---------------------------------------------------------------------------

    async def _connect(self) -> bool:
        """One attempt, bounded by the verdict timeout: producer, consumer, the partition count,
        the partitions of the runs already started. True when the client is connected."""
        self._why_not = "the broker did not answer within the verdict timeout"
        if not await self._reachable():
            self._why_not = (
                "no broker answers: check STALLWATCH_BOOTSTRAP, or start the local one with `make kafka-up`"
            )
            return False
        options = aiokafka_options(self.settings)
        timeout_ms = max(int(self.verdict_timeout_s * 1000), 1000)
        self._producer = Producer(acks="all", linger_ms=0, **{**options, "request_timeout_ms": timeout_ms})
        # read_committed: commands published ahead of their batch's transaction are in none and
        # seen at once; the others (CreateTime topics, STALLWATCH_PUBLISH_AHEAD=false) are in
        # their batch's, and an aborted batch's are never seen. Copies of one id are dropped
        # (`Run.deliver`): a batch read again publishes its commands again.
        self._consumer = Consumer(
            enable_auto_commit=False,
            auto_offset_reset="latest",
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
            **options,
        )
        self._assigned = set()
        try:
            async with asyncio.timeout(self.verdict_timeout_s):
                await self._producer.start()
                if not await self._topics_exist():
                    raise KafkaError("the topics are missing")
                await self._consumer.start()
                self._partitions = sorted(await self._producer.partitions_for(self.settings.commands_topic))
                for partition in sorted({self.partition_for(run_id) for run_id in self.runs}):
                    await self._follow(partition)
        except _UNREACHABLE as exc:
            log.debug("connection attempt failed: %r", exc)
            await self._close()
            return False
        self._reader = asyncio.create_task(self._read_commands(self._consumer), name="stallwatch-commands")
        self.connected = True
        return True

    async def _topics_exist(self) -> bool:
        """Whether the events and commands topics exist (else aiokafka waits out the timeout
        and the client would report the broker as unreachable)."""
        assert self._producer is not None
        wanted = {self.settings.events_topic, self.settings.commands_topic}
        for attempt in range(_TOPIC_CHECKS):
            metadata = await self._producer.client.fetch_all_metadata()
            if wanted <= metadata.topics():
                return True
            if attempt < _TOPIC_CHECKS - 1:
                await asyncio.sleep(_TOPIC_CHECK_WAIT_S)
        self._why_not = (
            f"the topics {', '.join(sorted(wanted - metadata.topics()))} do not exist: "
            f"start `stallwatch worker` (it creates them), or set STALLWATCH_TOPIC_PREFIX "
            f"to the workers' (now {self.settings.topic_prefix!r})"
        )
        return False

    async def _reachable(self) -> bool:
        """Whether any bootstrap server accepts a TCP connection: a quiet probe, since aiokafka
        logs an error for every refused attempt and the log should say it once."""
        for server in self.settings.bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(host.strip("[]"), int(port)), self._send_timeout_s
                )
            except (OSError, TimeoutError, ValueError):
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        return False

    async def _lose(self, why: object) -> None:
        """The broker is away: fail open from now on, say so once, reconnect in the background."""
        if self._failing_open:
            return  # already failing open; said so once
        self._failing_open = True
        self.connected = False
        log.warning(
            "stallwatch: %s (%s); every call is allowed until the broker answers again",
            why,
            self.settings.bootstrap,
        )
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        self._reader = None
        await self._close()
        self._reconnector = asyncio.create_task(self._reconnect(), name="stallwatch-reconnect")

    async def _reconnect(self) -> None:
        wait = _RETRY_FIRST_S
        while True:
            await asyncio.sleep(wait)
            if await self._connect():
                self._failing_open = False
                log.warning(
                    "stallwatch: the broker answers again (%s); verdicts resume", self.settings.bootstrap
                )
                self._reconnector = None
                return
            wait = min(wait * 2, _RETRY_MAX_S)

    async def _close(self) -> None:
        self._stalled.clear()
        parts = (self._consumer, self._producer)
        self._producer = self._consumer = None
        for part in parts:
            if part is not None:
                await stop_quietly(part)

    # -- runs and events ----------------------------------------------------------------------

    async def _prepare(self, run_id: str) -> None:
        if self.connected:
            await self._following(self.partition_for(run_id))

    async def _following(self, partition: int) -> bool:
        """Whether the partition's commands are followed, trying once more (within the send
        timeout) when they are not and the partition is not known to be stalled."""
        if TopicPartition(self.settings.commands_topic, partition) in self._assigned:
            return True
        if self._is_stalled(partition):
            return False
        try:
            async with asyncio.timeout(self._send_timeout_s):
                await self._follow(partition)
        except _UNREACHABLE as exc:
            await self._stalled_or_lost(partition, f"cannot follow its commands: {exc!r}")
            return False
        return True

    def partition_for(self, run_id: str) -> int:
        """The partition of a run's events and commands: Kafka's default partitioner (murmur2)."""
        if not self._partitions:
            raise RuntimeError(
                "the commands topic's partitions are not known yet: the broker has not been reached"
            )
        return self._partitioner(run_id.encode(), self._partitions, self._partitions)

    async def _follow(self, partition: int) -> None:
        """Add a commands partition to the assignment, reading from its end, keeping the others'
        positions (a new assignment would otherwise reset them)."""
        tp = TopicPartition(self.settings.commands_topic, partition)
        consumer = self._consumer
        async with self._assign_lock:
            if consumer is None or tp in self._assigned:
                return
            positions = {p: await consumer.position(p) for p in self._assigned}
            end = (await consumer.end_offsets([tp]))[tp]
            self._assigned.add(tp)
            consumer.assign(list(self._assigned))
            for p, offset in positions.items():
                consumer.seek(p, offset)
            consumer.seek(tp, end)

    async def _send(self, event: dict[str, Any]) -> bool:
        """Publish one event; False when it was not delivered within the send timeout: at once
        while the broker is away or the run's partition is stalled (its event then waits in the
        producer's queue, in order, for the partition's new leader)."""
        producer = self._producer
        if not self.connected or producer is None:
            # A turn of the loop even so: a caller that retries at once (a warm-up loop) must
            # not starve the reconnection task it is waiting for.
            await asyncio.sleep(0)
            return False
        run_id = event["run_id"]
        partition = self.partition_for(run_id)
        followed = await self._following(partition)
        delivery: asyncio.Future[Any] | None = None
        try:
            async with asyncio.timeout(self._send_timeout_s):
                delivery = await producer.send(
                    self.settings.events_topic, orjson.dumps(event), key=run_id.encode(), partition=partition
                )
                delivery.add_done_callback(_retrieve)  # awaited below or not
                if not followed or self._is_stalled(partition):
                    return False
                # Shielded: the event stays queued for the partition when the wait times out.
                await asyncio.shield(delivery)
        except TimeoutError as exc:
            await self._stalled_or_lost(partition, f"cannot publish an event: {exc!r}", delivery)
            return False
        except (KafkaError, OSError) as exc:
            await self._lose(f"cannot publish an event: {exc!r}")
            return False
        return True

    def _is_stalled(self, partition: int) -> bool:
        return partition in self._stalled

    async def _stalled_or_lost(
        self, partition: int, why: str, delivery: asyncio.Future[Any] | None = None
    ) -> None:
        """A partition that does not answer while the cluster does (its leader is gone, until
        the controller moves it) fails open for its own runs only; the others keep their
        verdicts. No broker answering: the client fails open as a whole and reconnects."""
        if not await self._reachable():
            await self._lose(why)
            return
        if partition not in self._stalled:
            log.warning(
                "stallwatch: partition %d does not answer (%s); its runs' calls are allowed until it does",
                partition,
                why,
            )
        # Until the event waiting on the partition is delivered (or given up by the producer), or
        # for one retry interval when there is none.
        self._stalled.add(partition)
        if delivery is not None:
            delivery.add_done_callback(lambda done: self._unstall(partition, done))
        else:
            asyncio.get_running_loop().call_later(_RETRY_FIRST_S, self._unstall, partition, None)

    def _unstall(self, partition: int, delivery: asyncio.Future[Any] | None) -> None:
        if delivery is not None and not delivery.cancelled() and delivery.exception() is not None:
            log.warning(
                "stallwatch: an event of partition %d was not delivered: %r", partition, delivery.exception()
            )
        if partition in self._stalled:
            self._stalled.discard(partition)
            log.info("stallwatch: partition %d answers again", partition)

    async def _read_commands(self, consumer: AIOKafkaConsumer) -> None:
        """The commands of the followed partitions, from this connection's consumer."""
        while True:
            if not self._assigned:
                await asyncio.sleep(0.05)
                continue
            try:
                batches = await consumer.getmany(timeout_ms=200)
            except KafkaError as exc:
                await self._lose(f"cannot read commands: {exc!r}")
                return
            for records in batches.values():
                for record in records:
                    run = self.runs.get(record.key.decode()) if record.key else None
                    if run is None:
                        continue  # another runtime's run on a shared partition
                    try:
                        run.deliver(decode_command(record.value))
                    except ValueError as exc:
                        log.warning("undecodable command at offset %d: %s", record.offset, exc)


def _retrieve(delivery: asyncio.Future[Any]) -> None:
    """Mark a delivery's failure as retrieved: a send not awaited (a stalled partition, a lost
    broker) would otherwise have asyncio log its traceback when the future is collected. The
    failure is already told by the stall or the loss it comes with."""
    if not delivery.cancelled() and delivery.exception() is not None:
        log.debug("an event was not delivered: %r", delivery.exception())


async def stop_quietly(part: AIOKafkaProducer | AIOKafkaConsumer) -> None:
    """Stop a producer or consumer whose broker may be gone, within _CLOSE_TIMEOUT_S."""
    try:
        await asyncio.wait_for(part.stop(), _CLOSE_TIMEOUT_S)
    except asyncio.CancelledError:
        task = asyncio.current_task()  # never None: a coroutine awaited runs in a task
        if task is not None and task.cancelling():
            raise  # our own task is being cancelled: let it
        # aiokafka cancels its pending sends when it stops: not a cancellation of ours
    except Exception as exc:  # whatever a dead connection raises on the way out
        log.debug("stopping %s: %r", type(part).__name__, exc)
