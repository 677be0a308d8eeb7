"""The group model's transactions (stallwatch_streams/worker/confluent/transactions.py) on the
local broker: a producer that fails fatally with its transaction open holds that transaction's
offsets unstable only until the group's next producer starts, and that one starts at once. The
fenced tasks' restores read those offsets stable: left to the coordinator, the transaction would
hold them until its timeout and the sweep after it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import ProducerFenced
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import TopicPartition as RdTopicPartition

from stallwatch.kafka.topics import ensure_topics
from stallwatch_streams.worker.confluent.options import librdkafka_options
from stallwatch_streams.worker.confluent.transactions import TRANSACTION_TIMEOUT_MS, GroupTransactions
from tests.kafka_harness import fresh_settings

pytestmark = pytest.mark.kafka

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


class CommitFailsFatally:
    """librdkafka's producer whose commit fails fatally before it reaches the broker, as a
    sequence gap fails one when a frozen node thaws: its transaction, records and offsets sent,
    stays open at the coordinator."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self._producer = Producer(conf)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def commit_transaction(self, timeout: float) -> None:
        raise KafkaException(
            RdKafkaError(RdKafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronization", fatal=True)
        )


async def test_a_producer_failed_with_its_transaction_open_holds_its_offsets_only_until_the_next_starts():
    settings = fresh_settings(1)
    await ensure_topics(settings)
    group_id = f"{settings.topic_prefix}-detector.tenants-0"
    made: list[Any] = []

    def make(conf: dict[str, Any]) -> Any:
        made.append(CommitFailsFatally(conf) if not made else Producer(conf))
        return made[-1]

    options = librdkafka_options(settings)
    reader = Consumer({**options, "group.id": group_id, "isolation.level": "read_committed"})
    metadata = reader.consumer_group_metadata()  # no member's: the broker checks no generation
    transactions = GroupTransactions(settings, f"{group_id}.w1", lambda: metadata, lambda _: True, make)
    tp = TopicPartition(settings.events_topic, 0)

    async def block(offset: int) -> None:
        task = transactions.participant(tp)
        async with task.transaction():
            await task.send(settings.commands_topic, b"verdict", key=b"run-1")
            await task.send_offsets_to_transaction({tp: offset}, group_id)

    def committed() -> int:
        """The stable read a restore makes: it waits while a transaction holds an offset of tp."""
        found = reader.committed([RdTopicPartition(tp.topic, tp.partition)], timeout=60)
        return int(found[0].offset)

    try:
        with pytest.raises(ProducerFenced):
            await block(5)
        failed = time.monotonic()
        assert await asyncio.to_thread(committed) == NO_OFFSET  # the open transaction aborted
        waited = time.monotonic() - failed
        # Left to the coordinator, the read waits at least the rest of the transaction's timeout.
        assert waited < TRANSACTION_TIMEOUT_MS / 1000 / 2, f"the stable read waited {waited:.1f} s"
        assert len(made) == 2  # started before any block entered again
        await block(7)
        assert await asyncio.to_thread(committed) == 7
    finally:
        await transactions.close()
        await asyncio.to_thread(reader.close)
