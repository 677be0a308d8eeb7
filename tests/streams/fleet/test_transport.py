"""The fleet app's transport: a topic Faust creates is known to its client before Faust goes on,
and a fetch never drains a partition Faust would then drop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiokafka
import mode
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import FleetService
from stallwatch_streams.fleet.settings import FleetSettings
from tests.kafka_harness import fresh_settings
from tests.waiting import until

pytestmark = pytest.mark.kafka


async def test_a_topic_faust_creates_is_known_to_its_client_with_every_partition_led() -> None:
    # Faust creates a table's changelog at start-up; a client that did not know it yet counted it
    # as 0 partitions at the join, and every table write failed (PartitionsMismatch).
    settings = fresh_settings(partitions=8)
    transport = FleetService(FleetSettings.from_env(settings)).app.transport
    client = aiokafka.AIOKafkaClient(bootstrap_servers=settings.bootstrap)
    await client.bootstrap()
    try:
        topic = f"{settings.topic_prefix}-created-by-faust"
        await transport._really_create_topic(mode.Service(), client, topic, 8, 1)
        assert client.cluster.partitions_for_topic(topic) == set(range(8))
        assert all(
            client.cluster.leader_for_partition(TopicPartition(topic, p)) not in (None, -1) for p in range(8)
        )
    finally:
        await client.close()


class _Fetching:
    """The fleet app's consumer thread (not started: only its fetch is used) over a real aiokafka
    consumer assigned both partitions of a real topic, and a producer to write to them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.thread = FleetService(FleetSettings.from_env(settings)).app.consumer._thread
        self.thread.consumer.flow_active = True
        self.p0, self.p1 = (TopicPartition(settings.tallies_topic, p) for p in (0, 1))
        self.reader = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=10,
        )
        self.writer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)

    async def write(self, tp: TopicPartition, n: int) -> None:
        for i in range(n):
            await self.writer.send_and_wait(tp.topic, b"x%d" % i, partition=tp.partition)

    async def offsets(self, live: set[Any], tp: TopicPartition, n: int) -> list[int]:
        """The offsets of `tp` fetched with `live` unpaused, until `n` of them (the records may
        come in several fetches); a record of another partition fails the test."""
        seen: list[int] = []
        while len(seen) < n:
            batch = await self.fetch(live, timeout=10.0)
            assert set(batch) <= {tp}, batch
            seen += [r.offset for r in batch.get(tp, [])]
        return seen

    def fetch(self, live: set[Any], timeout: float) -> asyncio.Task[Any]:
        return asyncio.create_task(
            self.thread._fetch_records(self.reader, live, timeout=timeout, max_records=500)
        )

    async def until_prefetched(self, tp: TopicPartition) -> None:
        """Until aiokafka's fetcher holds records of `tp`, read from the broker, not yet handed out."""
        await until(lambda: tp in self.reader._fetcher._records, 10, f"records of {tp} prefetched")

    async def until_waiting(self) -> None:
        """Until a fetch waits in aiokafka's fetcher for records to arrive."""
        await until(lambda: self.reader._fetcher._fetch_waiters, 10, "a fetch waiting for records")


@contextlib.asynccontextmanager
async def fetching() -> AsyncIterator[_Fetching]:
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)
    f = _Fetching(settings)
    await f.writer.start()
    await f.reader.start()
    f.reader.assign([f.p0, f.p1])
    await f.reader.seek_to_beginning(f.p0, f.p1)
    try:
        yield f
    finally:
        await f.reader.stop()
        await f.writer.stop()


async def test_a_fetch_waiting_when_every_partition_is_paused_drains_none_of_them() -> None:
    # Faust hands aiokafka its live set of unpaused partitions; a rebalance pauses them all while
    # a fetch waits. aiokafka read the emptied set as "every partition": it drained a table's
    # changelog that recovery had just sought to 0, and Faust dropped the batch (its flow was
    # stopped): recovery then waited forever for records already read (1 run in 5 of the test
    # of a second fleet worker taking over).
    async with fetching() as f:
        await _paused_while_waiting(f)


async def _paused_while_waiting(f: _Fetching) -> None:
    await f.write(f.p0, 3)
    await f.write(f.p1, 3)
    live = {f.p0}
    assert await f.offsets(live, f.p0, 3) == [0, 1, 2]
    await f.until_prefetched(f.p1)  # p1's records wait in the fetcher, unread: p1 is paused
    waiting = f.fetch(live, timeout=2.0)
    await f.until_waiting()
    live.clear()  # every partition paused while the fetch waits
    await f.write(f.p0, 1)  # new data wakes the waiting fetch
    assert await waiting == {}
    assert await f.reader.position(f.p1) == 0  # nothing of p1 read behind Faust's back
    live.add(f.p1)
    assert await f.offsets(live, f.p1, 3) == [0, 1, 2]


async def test_a_fetch_returning_after_the_flow_stopped_leaves_its_records_to_be_read_again() -> None:
    # Faust drops a batch that arrives after a rebalance stopped its flow, and seeks back only
    # partitions with a committed offset (a changelog never has one): the batch is put back.
    async with fetching() as f:
        await _stopped_while_waiting(f)


async def _stopped_while_waiting(f: _Fetching) -> None:
    live = {f.p0, f.p1}
    waiting = f.fetch(live, timeout=5.0)
    await f.until_waiting()
    f.thread.consumer.flow_active = False  # a rebalance began while the fetch waited
    await f.write(f.p1, 2)
    assert await waiting == {}
    assert await f.reader.position(f.p1) == 0
    f.thread.consumer.flow_active = True
    assert await f.offsets(live, f.p1, 2) == [0, 1]
