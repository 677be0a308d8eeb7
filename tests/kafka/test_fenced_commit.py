"""A commit fenced by a newer producer of its partition raises the fencing and leaves no failure
behind for the event loop to report as never retrieved, on a real broker."""

from __future__ import annotations

import asyncio
import gc
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import ProducerFenced

from stallwatch_streams.worker.commit import CommitPlan, Write, write_plan
from tests.kafka_harness import BOOTSTRAP

pytestmark = pytest.mark.kafka


def plan(topic: str, value: bytes) -> CommitPlan:
    return CommitPlan(TopicPartition(topic, 0), [Write(topic, b"k", value)], 1, {}, [], group_offsets=False)


async def test_a_fenced_commit_raises_the_fencing_and_leaves_nothing_unretrieved():
    topic = f"fenced-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    transactional_id = f"fenced-{uuid.uuid4().hex[:8]}"
    old = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=transactional_id)
    new = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=transactional_id)
    try:
        await old.start()
        await write_plan(old, plan(topic, b"before"), "group")
        await new.start()  # fences the old one
        with pytest.raises(ProducerFenced):
            await write_plan(old, plan(topic, b"after"), "group")
        await old.stop()
        del old
        gc.collect()  # a future never retrieved is reported, at once, when it is collected
    finally:
        loop.set_exception_handler(handler)
        await new.stop()
    assert [c["message"] for c in reported] == []
