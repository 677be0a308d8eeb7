"""The group model's transactions (stallwatch_streams/worker/confluent/transactions.py) on a fake
librdkafka producer: every task's block in one transaction, committed once, in phases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException

from stallwatch.settings import Settings
from stallwatch_streams.worker.confluent.transactions import GroupTransactions, TransactionFailed
from tests.waiting import until


class FakeProducer:
    """librdkafka's transactional producer as the group uses it: what it was asked, in order."""

    def __init__(
        self,
        conf: dict[str, Any],
        fail_commit: KafkaException | None = None,
        fail_offsets_once: KafkaException | None = None,
    ) -> None:
        self.conf = conf
        self.calls: list[tuple[Any, ...]] = []
        self.fail_commit = fail_commit
        self.fail_offsets_once = fail_offsets_once

    def init_transactions(self, timeout: float) -> None:
        self.calls.append(("init",))

    def begin_transaction(self) -> None:
        self.calls.append(("begin",))

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None:
        self.calls.append(("produce", topic, partition))

    def send_offsets_to_transaction(self, offsets: list[Any], metadata: Any, timeout: float) -> None:
        failure, self.fail_offsets_once = self.fail_offsets_once, None
        if failure is not None:
            self.calls.append(("offsets refused",))
            raise failure
        self.calls.append(("offsets", sorted((o.topic, o.partition, o.offset) for o in offsets), metadata))

    def commit_transaction(self, timeout: float) -> None:
        if self.fail_commit is not None:
            raise self.fail_commit
        self.calls.append(("commit",))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append(("abort",))

    def purge(self) -> None:
        self.calls.append(("purge",))

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def group(linger_s: float = 0.05, **fake: Any) -> tuple[GroupTransactions, list[FakeProducer]]:
    made: list[FakeProducer] = []

    def make(conf: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(conf, **fake))
        return made[-1]

    settings = Settings(commit_interval_s=linger_s)
    transactions = GroupTransactions(
        settings, "g.tenants-0.w1", lambda: "generation-7", lambda topic: topic.endswith(".commands"), make
    )
    return transactions, made


async def block(
    transactions: GroupTransactions, topic: str, partition: int, offset: int, writes: list[str]
) -> None:
    producer = transactions.participant(TopicPartition(topic, partition))
    async with producer.transaction():
        for write in writes:
            await producer.send(write, b"v", key=b"k", partition=partition)
        await producer.send_offsets_to_transaction({TopicPartition(topic, partition): offset}, "ignored")


async def test_blocks_entering_within_the_interval_share_one_transaction_with_all_their_offsets():
    transactions, made = group(linger_s=0.05)
    await asyncio.gather(
        block(transactions, "a.events", 0, 10, ["a.changelog"]),
        block(transactions, "b.events", 1, 20, ["b.changelog", "b.tallies"]),
    )
    [producer] = made
    kinds = [call[0] for call in producer.calls]
    assert kinds == ["init", "begin", "produce", "produce", "produce", "offsets", "commit"]
    assert producer.calls[5] == ("offsets", [("a.events", 0, 10), ("b.events", 1, 20)], "generation-7")
    assert producer.conf["transactional.id"] == "g.tenants-0.w1"
    assert transactions.transactions == 1


async def test_a_block_that_waits_for_no_verdict_lingers_for_the_next_one():
    transactions, made = group(linger_s=0.5)
    first = asyncio.create_task(block(transactions, "a.events", 0, 1, ["a.changelog"]))
    await until(lambda: made and ("produce", "a.changelog", 0) in made[0].calls, 5, "the first block's write")
    for _ in range(5):
        await asyncio.sleep(0)
    assert not first.done()  # its block ended; the transaction waits out the interval
    await asyncio.gather(first, block(transactions, "a.events", 1, 5, ["a.changelog"]))
    kinds = [call[0] for call in made[0].calls]
    assert kinds.count("begin") == 1 and kinds.count("commit") == 1
    assert ("offsets", [("a.events", 0, 1), ("a.events", 1, 5)], "generation-7") in made[0].calls


async def test_a_block_with_commands_in_it_commits_at_once():
    transactions, made = group(linger_s=3600.0)  # a verdict waits: no interval is waited out
    await asyncio.wait_for(block(transactions, "a.events", 0, 3, ["a.commands"]), 5)
    assert made[0].calls[-1] == ("commit",)


async def test_a_failing_block_aborts_the_transaction_and_every_other_block_in_it_fails():
    transactions, made = group(linger_s=0.05)
    participant = transactions.participant(TopicPartition("a.events", 0))

    async def failing() -> None:
        async with participant.transaction():
            await participant.send("a.changelog", b"v", key=b"k")
            raise KafkaError("a send failed")

    results = await asyncio.gather(
        failing(), block(transactions, "b.events", 0, 4, ["b.changelog"]), return_exceptions=True
    )
    assert isinstance(results[0], KafkaError) and not isinstance(results[0], TransactionFailed)
    assert isinstance(results[1], TransactionFailed)
    assert "commit" not in [call[0] for call in made[0].calls]
    assert made[0].calls[-1] == ("abort",)
    # The next transaction starts clean on the same producer.
    await block(transactions, "b.events", 0, 4, ["b.changelog"])
    assert made[0].calls[-1] == ("commit",) and len(made) == 1


async def test_a_fatal_error_is_a_fencing_of_every_block_and_the_next_transaction_starts_a_new_producer():
    fenced = -144  # librdkafka's RD_KAFKA_RESP_ERR__FENCED
    fatal = KafkaException(RdKafkaError(fenced, "fenced by a newer instance", fatal=True))
    transactions, made = group(linger_s=0.01, fail_commit=fatal)
    results = await asyncio.gather(
        block(transactions, "a.events", 0, 1, ["a.changelog"]),
        block(transactions, "b.events", 0, 1, ["b.changelog"]),
        return_exceptions=True,
    )
    assert all(isinstance(result, ProducerFenced) for result in results), results
    assert ("purge",) in made[0].calls  # emptied before it is let go
    with pytest.raises(ProducerFenced):  # its fake fails the same way
        await block(transactions, "a.events", 0, 1, ["a.changelog"])
    assert len(made) == 2 and made[1].calls[:2] == [("init",), ("begin",)]


async def test_offsets_refused_with_a_retriable_error_are_sent_again_and_the_transaction_commits():
    # A coordinator loading the group's offsets after a broker's loss: the step is tried again,
    # not the transaction aborted (every task in it would be rebuilt).
    loading = 14  # COORDINATOR_LOAD_IN_PROGRESS
    refused = KafkaException(RdKafkaError(loading, "coordinator load in progress", retriable=True))
    transactions, made = group(linger_s=0.01, fail_offsets_once=refused)
    await block(transactions, "a.events", 0, 7, ["a.changelog"])
    kinds = [call[0] for call in made[0].calls]
    assert kinds == ["init", "begin", "produce", "offsets refused", "offsets", "commit"]
    assert transactions.transactions == 1
