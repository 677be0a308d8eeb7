"""The client for agent runtimes on Kafka: events out, only its own runs' command partitions in."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from stallwatch.client.run import Client
from stallwatch.contract.commands import decode_command
from stallwatch.kafka_config import aiokafka_options
from stallwatch.settings import Settings

log = logging.getLogger(__name__)

# How long a runtime waits for a verdict before it runs the call anyway (failing open).
DEFAULT_VERDICT_TIMEOUT_S = 5.0


class KafkaClient(Client):
    """Publishes a runtime's events keyed by run id and reads the commands of its runs.

    The consumer is assigned only the commands partitions the client's runs hash to (same key,
    same partitioner, same partition count as the events), so a fleet of runtimes does not each
    read the whole commands topic.
    """

    def __init__(self, settings: Settings | None = None,
                 verdict_timeout_s: float = DEFAULT_VERDICT_TIMEOUT_S) -> None:
        super().__init__()
        self.settings = settings or Settings.from_env()
        self.verdict_timeout_s = verdict_timeout_s
        options = aiokafka_options(self.settings)
        self._producer = AIOKafkaProducer(acks="all", linger_ms=0, **options)
        self._consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="latest",
                                          isolation_level="read_committed",
                                          fetch_max_wait_ms=100, **options)
        self._partitioner = DefaultPartitioner()
        self._partitions: list[int] = []
        self._assigned: set[TopicPartition] = set()
        self._assign_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._producer.start()
        await self._consumer.start()
        self._partitions = sorted(await self._producer.partitions_for(self.settings.commands_topic))
        self._reader = asyncio.create_task(self._read_commands(), name="stallwatch-commands")

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self._consumer.stop()
        await self._producer.stop()

    async def __aenter__(self) -> KafkaClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _prepare(self, run_id: str) -> None:
        await self._follow(self.partition_for(run_id))

    def partition_for(self, run_id: str) -> int:
        """The partition of a run's events and commands: Kafka's default partitioner (murmur2)."""
        return self._partitioner(run_id.encode(), self._partitions, self._partitions)

    async def _follow(self, partition: int) -> None:
        """Add a commands partition to the assignment, reading from its end, keeping the others'
        positions (a new assignment would otherwise reset them)."""
        tp = TopicPartition(self.settings.commands_topic, partition)
        async with self._assign_lock:
            if tp in self._assigned:
                return
            positions = {p: await self._consumer.position(p) for p in self._assigned}
            end = (await self._consumer.end_offsets([tp]))[tp]
            self._assigned.add(tp)
            self._consumer.assign(list(self._assigned))
            for p, offset in positions.items():
                self._consumer.seek(p, offset)
            self._consumer.seek(tp, end)

    async def _send(self, event: dict[str, Any]) -> None:
        await self._producer.send_and_wait(self.settings.events_topic, orjson.dumps(event),
                                           key=event["run_id"].encode())

    async def _read_commands(self) -> None:
        while True:
            if not self._assigned:
                await asyncio.sleep(0.05)
                continue
            batches = await self._consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    run = self.runs.get(record.key.decode()) if record.key else None
                    if run is None:
                        continue  # another runtime's run on a shared partition
                    try:
                        run.deliver(decode_command(record.value))
                    except ValueError as exc:
                        log.warning("undecodable command at offset %d: %s", record.offset, exc)
