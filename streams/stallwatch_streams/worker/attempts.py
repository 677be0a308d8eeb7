"""What each partition's owner was applying when it died: a batch that killed its worker does
not kill the next one, and the event that did it becomes a dead letter.

Before it applies a batch, an owner writes the batch's first and last offsets, and waits for the
write's acknowledgement; the records go to `{prefix}.worker-attempts` (compacted, one key per
partition), outside any transaction: the transaction of a worker that dies is aborted, and this
record must outlive it. An owner that dies leaves the batch it was applying; its successor, at
its takeover, finds that batch above its committed position and applies those records carefully:
one at a time, each one's offset written (and acknowledged) before it is applied. If it dies too,
its successor finds the offset of the event it died on: that event is dead-lettered
(`worker_crash`), its run quarantined (calls allowed, nothing judged), and the partition moves on.
A poison event costs two deaths: the first finds the batch, the second the event.

A careful successor follows an owner that died with a batch in hand, and only over that batch:
a round trip per record of it. A clean handover (a rebalance, a stop) commits its batches first,
so the record names nothing above the successor's position.

Only a death counts. Once what a record names is applied, its owner makes it idle (`idle`: the
careful stretch and the known poison kept, nothing in hand; a task's writes go one at a time, in
order), so a record names a batch or an event only while it is applied: a kill while its
transaction waits makes no successor careful. The idle records go with the next fetch's batch
records, in one round of writes (a batch's record replaces its partition's idle one), or alone
before the owner waits for more records. Where the producer takes a record at once (librdkafka's),
an idle one is sent without waiting for its acknowledgement: the task's next record goes through
the same idempotent producer after it, so it lands after it, and an idle record lost in a
producer's failure leaves the busy one before it, the careful side; a task that loses its
partition alive writes a posted record again, awaited.
Where the producer takes a record at once, an applied batch's record is not made idle but
posted to name the next AHEAD_RECORDS offsets (`Attempt.ahead_of`): the next batch within them
is applied once that record is acknowledged, with no write of its own, so a partition under
steady traffic writes one record every AHEAD_RECORDS // 2 events and its verdicts wait for no
round trip of the guard's. The price is a death's: a successor is careful through the offsets
that record names, whenever its owner dies, not only while it applies: what its owner had
applied and not committed (at most AHEAD_UNCOMMITTED_MAX events, past which the record goes idle
as before) and at most AHEAD_RECORDS more. A careful owner's records still go idle once each
event is applied, so a second death makes an event poison only while that event is applied.
Each record names the process that wrote it (`owner`, drawn at its start: a pod restarted under
its StatefulSet name is another process), and a takeover that finds its own process's record
takes nothing from it: this process lives (a partition fenced by a frozen broker and given
back). An owner that loses a partition alive (its producer fenced, its transaction failed)
leaves no busy record before the group can move it. An owner that dies for another reason while
an event is applied has that event taken for the cause: its run is quarantined, which leans to
"keep going".
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings
from stallwatch_streams.worker import producers

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# Events found to kill a worker that a record carries at most (the newest kept): past this, an
# older one may be met again and cost two more deaths.
MAX_POISON = 64
# Offsets an applied batch's record names ahead of it, where the producer takes a record at once;
# posted again once fewer than half of them are left. A death costs its successor at most this
# many careful events beyond what its owner had applied and not committed.
AHEAD_RECORDS = 16
# ... and only while at most this many events it applied wait for their commit: a successor's
# careful pass after a death stays under this plus AHEAD_RECORDS events, where commits held back
# (a frozen broker) would make it thousands; past it, the record is made idle as before.
AHEAD_UNCOMMITTED_MAX = 4 * AHEAD_RECORDS
# This process, in the records it writes: a worker restarted is another owner.
THIS_PROCESS = uuid.uuid4().hex[:16]


@dataclass(frozen=True, slots=True)
class Attempt:
    """What an owner of a partition is applying: a batch (`batch`, first and last offset), or,
    while it is careful, one event (`applying`); through which offset it applies carefully
    (`careful_through`: the batch its predecessor died on), and the events known to kill a worker
    that are not committed yet (`poison`); `owner`, the process that wrote it (None: not
    written yet, or by a release that did not say)."""

    careful_through: int | None = None
    poison: tuple[int, ...] = ()
    batch: tuple[int, int] | None = None
    applying: int | None = None
    owner: str | None = None

    def careful(self, offset: int) -> bool:
        return self.careful_through is not None and offset <= self.careful_through

    def at(self, offset: int) -> Attempt:
        """About to apply the event at `offset` alone."""
        return replace(self, batch=None, applying=offset)

    def over(self, first: int, last: int) -> Attempt:
        """About to apply the batch from `first` to `last`."""
        return replace(self, batch=(first, last), applying=None)

    def ahead_of(self, offset: int) -> Attempt:
        """About to apply the next AHEAD_RECORDS events from `offset`, when they come."""
        return self.over(offset, offset + AHEAD_RECORDS - 1)

    def covers(self, first: int, last: int) -> bool:
        """Whether its batch names every offset from `first` to `last`."""
        return self.batch is not None and self.batch[0] <= first and last <= self.batch[1]

    @property
    def idle(self) -> Attempt:
        """Applying nothing: what it applied did not kill it (its careful stretch and the known
        poison kept)."""
        return replace(self, batch=None, applying=None)

    @property
    def busy(self) -> bool:
        """Whether it names something being applied."""
        return self.batch is not None or self.applying is not None

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "v": FORMAT_VERSION,
                "careful_through": self.careful_through,
                "poison": list(self.poison),
                "batch": None if self.batch is None else list(self.batch),
                "applying": self.applying,
                "owner": self.owner,
            }
        )

    @classmethod
    def decode(cls, raw: bytes | None) -> Attempt | None:
        """None for a record of another format version, or one that does not parse: a takeover
        then applies as if nothing had died, the "keep going" side."""
        try:
            data = orjson.loads(raw or b"")
            if data.get("v") != FORMAT_VERSION:
                return None
            batch, applying, through = data["batch"], data["applying"], data["careful_through"]
            owner = data.get("owner")  # absent from the release before
            return cls(
                None if through is None else int(through),
                tuple(int(p) for p in data["poison"][-MAX_POISON:]),
                None if batch is None else (int(batch[0]), int(batch[1])),
                None if applying is None else int(applying),
                owner if isinstance(owner, str) else None,
            )
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError, IndexError):
            return None


def takeover(previous: Attempt | None, position: int, owner: str | None = None) -> Attempt:
    """The attempt of an owner that starts at `position` (its committed position, -1 for none)
    after `previous`, the last record of the partition's owners: careful through the batch the
    previous owner had in hand, the event it died on (if careful) added to the poison, everything
    at or below `position` committed and so forgotten. A record `owner` (this process) wrote
    tells of no death: only its careful stretch and its poison carry over."""
    if previous is None:
        return Attempt()
    if owner is not None and previous.owner == owner:
        previous = previous.idle
    poison = {p for p in previous.poison if p >= position}
    if previous.applying is not None and previous.applying >= position:
        poison.add(previous.applying)
    ends = [previous.careful_through, None if previous.batch is None else previous.batch[1]]
    through = max((end for end in ends if end is not None and end >= position), default=None)
    return Attempt(through, tuple(sorted(poison)[-MAX_POISON:]))


def key_of(events_topic: str, partition: int) -> str:
    return f"{events_topic}/{partition}"


class AttemptLog:
    """The worker's attempts topic: one producer for every pipeline (started at the first write,
    acknowledged by every in-sync replica, replaced after a failed write), and a read of the
    whole topic at takeovers (one key per partition of every tenant, compacted). The takeovers
    asked for while a read is under way are read together in the next one: a worker joining
    hundreds of tenants reads the topic a few times, not once per tenant."""

    def __init__(self, settings: Settings, owner: str = THIS_PROCESS) -> None:
        self.settings = settings.for_tenant(None)
        self.topic = self.settings.attempts_topic
        self.owner = owner  # written into every record
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()
        self._wanted: list[tuple[Collection[str], asyncio.Future[dict[str, Attempt]]]] = []
        self._reading = asyncio.Lock()
        self._reads: set[asyncio.Task[None]] = set()

    async def read(self, keys: Collection[str]) -> dict[str, Attempt]:
        """The latest attempt of each key in `keys` that has one, from a read of the topic that
        began after this call (so it holds every write acknowledged before it)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[dict[str, Attempt]] = loop.create_future()
        self._wanted.append((keys, done))
        # A task of its own: a caller cancelled meanwhile must not leave the others' reads unanswered.
        reading = loop.create_task(self._read_wanted(), name="attempts-read")
        self._reads.add(reading)
        reading.add_done_callback(self._reads.discard)
        return await done

    async def _read_wanted(self) -> None:
        async with self._reading:
            wanted, self._wanted = self._wanted, []
            if not wanted:
                return  # read together with earlier ones
            try:
                found = await self._read_all({key for keys, _ in wanted for key in keys})
            except BaseException as exc:
                for _, done in wanted:
                    if done.done():
                        continue
                    if isinstance(exc, Exception):
                        done.set_exception(exc)
                    else:
                        done.cancel()
                if not isinstance(exc, Exception):
                    raise
                return
            for keys, done in wanted:
                if not done.done():
                    done.set_result({key: found[key] for key in keys if key in found})

    async def _read_all(self, keys: Collection[str]) -> dict[str, Attempt]:
        wanted = {key.encode(): key for key in keys}
        found: dict[str, Attempt] = {}

        def take(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
            for record in records:
                key = wanted.get(record.key)
                if key is None:
                    continue
                attempt = Attempt.decode(record.value)
                if attempt is None:
                    found.pop(key, None)
                else:
                    found[key] = attempt

        consumer = committed_reader(aiokafka_options(self.settings))
        try:
            await consumer.start()
            partitions = consumer.partitions_for_topic(self.topic) or {0}
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            await read_to_end(consumer, tps, take)
        finally:
            await consumer.stop()
        return found

    async def write(self, key: str, attempt: Attempt) -> None:
        """Written and acknowledged: the batch (or the event) it names may now be applied. A
        failed write stops the producer, so that the caller's retry starts a fresh one: after a
        broker restart a producer can refuse every later send."""
        producer = await self._started()
        try:
            await producer.send_and_wait(self.topic, self.encode(attempt), key=key.encode())
        except Exception:  # a write cancelled (a stop) leaves the producer as it was
            if self._producer is producer:
                self._producer = None
            await producers.stop_quietly(producer)
            raise

    def post(self, key: str, attempt: Attempt) -> bool:
        """Sent without waiting for its acknowledgement, where the producer takes it at once:
        an idle record, which no apply waits for. False when it was not sent (aiokafka's producer
        sends from the loop): the caller writes it instead."""
        return False

    def post_ahead(self, key: str, attempt: Attempt) -> asyncio.Future[Any] | None:
        """Sent without waiting for its acknowledgement, which the future returned settles, where
        the producer takes it at once: a record naming offsets ahead (`Attempt.ahead_of`). None
        when it was not sent (aiokafka's producer sends from the loop): the caller makes the
        record idle instead."""
        return None

    def encode(self, attempt: Attempt) -> bytes:
        """The record's value, signed with this owner."""
        return replace(attempt, owner=self.owner).encode()

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def _started(self) -> AIOKafkaProducer:
        async with self._starting:
            if self._producer is None:
                self._producer = await producers.start_attempts_producer(self.settings)
            return self._producer
