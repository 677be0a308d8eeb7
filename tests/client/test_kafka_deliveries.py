"""Every delivery the Kafka client asks of its producer has its failure retrieved, awaited or not:
a send left queued for a stalled partition that the producer later fails (its leader's broker
killed: NodeNotReadyError) must not have asyncio print "Future exception was never retrieved"
when the future is collected. No broker: the producer is a stand-in."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import NodeNotReadyError

from stallwatch.client import KafkaClient
from stallwatch.settings import Settings


class QueuingProducer:
    """A producer whose sends stay queued until the test settles them."""

    def __init__(self) -> None:
        self.sent: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None):
        delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append(delivery)
        return delivery


async def test_a_send_to_a_stalled_partition_has_its_failure_retrieved():
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context["message"]))
    try:
        client = KafkaClient(Settings(bootstrap="127.0.0.1:1"))  # never started: no broker reached
        producer = QueuingProducer()
        # What a connected client holds, with partition 0 followed and known to be stalled.
        client._producer = producer  # type: ignore[assignment]  # noqa: SLF001 - the producer's stand-in
        client._partitions = [0]  # noqa: SLF001 - what `_connect` reads from the broker
        client._assigned = {TopicPartition(client.settings.commands_topic, 0)}  # noqa: SLF001 - as `_follow` adds
        client._stalled = {0}  # noqa: SLF001 - as `_stalled_or_lost` marks a leader gone
        client.connected = True

        assert await client._send({"run_id": "stalled-run"}) is False  # noqa: SLF001 - the path not awaited
        [delivery] = producer.sent
        producer.sent.clear()
        delivery.set_exception(NodeNotReadyError("the partition's leader is gone"))
        await asyncio.sleep(0)  # a turn of the loop: the future's done callbacks run
        del delivery
        gc.collect()
    finally:
        loop.set_exception_handler(before)
    assert not [message for message in seen if "never retrieved" in message], seen
