"""An idempotent producer's batch that waits for its partition's leader is never overtaken by the
batch queued behind it, on a real broker: the broker holds no state for a fresh producer, so a
batch lost unsent (expired) would leave a gap it accepts."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stallwatch.kafka.aiokafka_patch import batches_wait_for_a_leader
from tests.kafka_harness import BOOTSTRAP

pytestmark = pytest.mark.kafka

REQUEST_TIMEOUT_MS = 1000
# Past the request timeout, after which aiokafka expires a batch unsent, and shorter than the
# second batch's wait (sent SECOND_AFTER_S later), which reaches the leader back.
NO_LEADER_S = 1.6
SECOND_AFTER_S = 0.9
# Two records too big to share a batch: the second is a batch of its own, queued behind the first.
BATCH_BYTES = 1024
FIRST, SECOND = b"1" * 800, b"2" * 800


async def first_then_second(wait_for_a_leader: bool) -> list[bytes]:
    """What the topic holds after a fresh producer sent `first`, then `second`, while its metadata
    named no leader for the partition (as a restarted broker's does for a while)."""
    topic = f"ahead-order-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=BOOTSTRAP,
        enable_idempotence=True,
        acks="all",
        linger_ms=0,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        max_batch_size=BATCH_BYTES,
    )
    if wait_for_a_leader:
        batches_wait_for_a_leader(producer)
    await producer.start()
    try:
        await producer.client._wait_on_metadata(topic)
        cluster = producer.client.cluster
        leader_of = cluster.leader_for_partition
        no_leader_until = time.monotonic() + NO_LEADER_S
        cluster.leader_for_partition = lambda tp: -1 if time.monotonic() < no_leader_until else leader_of(tp)
        first = await producer.send(topic, FIRST, partition=0)
        await asyncio.sleep(SECOND_AFTER_S)  # the thing under test: the second batch queued this much later
        second = await producer.send(topic, SECOND, partition=0)
        await asyncio.gather(first, second, return_exceptions=True)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        fetched = await consumer.getmany(tp, timeout_ms=3000)
        return [record.value for record in fetched.get(tp, [])]
    finally:
        await consumer.stop()


async def test_a_batch_waiting_for_a_leader_is_written_before_the_one_behind_it():
    assert await first_then_second(wait_for_a_leader=True) == [FIRST, SECOND]


async def test_without_the_patch_aiokafka_loses_the_first_and_writes_the_second():
    # The hole the patch closes, so that a fixed aiokafka shows here (and the patch can go).
    assert await first_then_second(wait_for_a_leader=False) == [SECOND]
