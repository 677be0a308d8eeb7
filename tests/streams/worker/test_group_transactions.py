"""The group model's transactions (stallwatch_streams/worker/confluent/transactions.py) on a fake
librdkafka producer: every task's block in one transaction, committed once, in phases; written
again when the group's generation moved under it, while the group holds its partitions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException

from stallwatch.settings import Settings
from stallwatch_streams.worker.commit import AbortedForAnother, CommitPlan, Write, write_plan
from stallwatch_streams.worker.confluent import calls, transactions
from stallwatch_streams.worker.confluent.transactions import (
    GENERATION_TRIES,
    TRANSACTION_TIMEOUT_MS,
    GroupTransactions,
    TransactionFailed,
)
from tests.waiting import until


class FakeProducer:
    """librdkafka's transactional producer as the group uses it: what it was asked, in order."""

    def __init__(
        self,
        conf: dict[str, Any],
        fail_commit: KafkaException | None = None,
        refuse_offsets: list[KafkaException] | None = None,
        refuse_after_abort: KafkaException | None = None,
        fail_offsets_once: KafkaException | None = None,
        hold_offsets: list[threading.Event] | None = None,
    ) -> None:
        self.conf = conf
        self.calls: list[tuple[Any, ...]] = []
        self.fail_commit = fail_commit
        self.refuse_offsets = refuse_offsets or []  # the next offsets sent are refused with these
        self.refuse_after_abort = refuse_after_abort  # refuses every record after an abort
        self.fail_offsets_once = fail_offsets_once
        # Shared by the producers: the next offsets sent block, whatever their timeout, until the
        # first event is set.
        self.hold_offsets = hold_offsets if hold_offsets is not None else []
        self.timeouts: list[float] = []  # given to the calls of a transaction's commit

    def init_transactions(self, timeout: float) -> None:
        self.calls.append(("init",))

    def begin_transaction(self) -> None:
        self.calls.append(("begin",))

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None:
        if self.refuse_after_abort is not None and ("abort",) in self.calls:
            raise self.refuse_after_abort
        self.calls.append(("produce", topic, partition))

    def send_offsets_to_transaction(self, offsets: list[Any], metadata: Any, timeout: float) -> None:
        self.timeouts.append(timeout)
        if self.hold_offsets:
            self.calls.append(("offsets held",))
            self.hold_offsets.pop(0).wait()
            return
        failure, self.fail_offsets_once = self.fail_offsets_once, None
        if failure is not None:
            self.calls.append(("offsets refused",))
            raise failure
        self.calls.append(("offsets", sorted((o.topic, o.partition, o.offset) for o in offsets), metadata))
        if self.refuse_offsets:
            raise self.refuse_offsets.pop(0)

    def commit_transaction(self, timeout: float) -> None:
        self.timeouts.append(timeout)
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


def group(
    linger_s: float = 0.05,
    metadata: Callable[[], str] = lambda: "generation-7",
    holds: Callable[[Any], bool] = lambda _: False,
    **fake: Any,
) -> tuple[GroupTransactions, list[FakeProducer]]:
    made: list[FakeProducer] = []

    def make(conf: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(conf, **fake))
        return made[-1]

    settings = Settings(commit_interval_s=linger_s)
    transactions = GroupTransactions(
        settings,
        "g.tenants-0.w1",
        metadata,
        lambda topic: topic.endswith(".commands"),
        make,
        holds=holds,
    )
    return transactions, made


def generation_moved() -> KafkaException:
    return KafkaException(RdKafkaError(RdKafkaError.ILLEGAL_GENERATION, "generation id is not valid"))


async def block(
    transactions: GroupTransactions, topic: str, partition: int, offset: int, writes: list[str]
) -> None:
    producer = transactions.participant(TopicPartition(topic, partition))
    async with producer.transaction():
        for write in writes:
            await producer.send(write, b"v", key=b"k", partition=partition)
        await producer.send_offsets_to_transaction({TopicPartition(topic, partition): offset}, "ignored")


async def test_a_plan_goes_into_the_groups_transaction_record_by_record_with_no_future_each():
    transactions, made = group()
    tp = TopicPartition("a.events", 1)
    writes = [Write("a.changelog", b"run", b"state"), Write("a.deadletter", b"run", b"letter")]
    participant = transactions.participant(tp)

    async def no_send(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a record sent with a future")

    participant.send = no_send  # type: ignore[method-assign]
    await write_plan(participant, CommitPlan(tp, writes, 9, {}, []), "ignored")
    assert made[0].calls == [
        ("init",),
        ("begin",),
        ("produce", "a.changelog", 1),
        ("produce", "a.deadletter", 1),
        ("offsets", [("a.events", 1, 9)], "generation-7"),
        ("commit",),
    ]


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
    assert isinstance(results[1], AbortedForAnother)  # not its own failure (commit.AbortedForAnother)
    assert "commit" not in [call[0] for call in made[0].calls]
    assert made[0].calls[-1] == ("abort",)
    # The next transaction starts clean on the same producer.
    await block(transactions, "b.events", 0, 4, ["b.changelog"])
    assert made[0].calls[-1] == ("commit",) and len(made) == 1


async def test_a_fatal_error_is_a_fencing_of_every_block_and_a_new_producer_starts_at_once():
    # The new producer's start aborts what the old one left open: the fenced tasks' restores read
    # their offsets stable, which waits for that transaction, so it starts before any block enters.
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
    await until(lambda: len(made) == 2 and made[1].calls == [("init",)], 5, "a new producer started")
    with pytest.raises(ProducerFenced):  # its fake fails the same way
        await block(transactions, "a.events", 0, 1, ["a.changelog"])
    assert made[1].calls[:2] == [("init",), ("begin",)]  # the next transaction on the started one
    await transactions.close()


async def test_a_transaction_the_group_moved_under_is_written_again_with_the_new_generation():
    def metadata() -> str:
        """The group's generation: one more once the refused transaction was aborted."""
        return f"generation-{7 + sum(call == ('abort',) for call in made[0].calls)}"

    transactions, made = group(
        linger_s=0.01, metadata=metadata, holds=lambda _: True, refuse_offsets=[generation_moved()]
    )
    # No failure for the task: committed on the second try.
    await asyncio.wait_for(block(transactions, "a.events", 0, 10, ["a.changelog", "a.tallies"]), 5)
    producer = made[0]
    refused = ["init", "begin", "produce", "produce", "offsets", "abort"]
    again = ["begin", "produce", "produce", "offsets", "commit"]
    assert [call[0] for call in producer.calls] == refused + again
    assert producer.calls[7:9] == producer.calls[2:4]  # the same records, in the same order
    assert producer.calls[9] == ("offsets", [("a.events", 0, 10)], "generation-8")
    assert transactions.transactions == 1


async def test_a_transaction_is_not_written_again_once_the_group_took_a_partition_of_it_away():
    held = {TopicPartition("a.events", 0)}
    transactions, made = group(
        linger_s=0.01, holds=lambda tps: set(tps) <= held, refuse_offsets=[generation_moved()]
    )
    results = await asyncio.gather(
        block(transactions, "a.events", 0, 10, ["a.changelog"]),
        block(transactions, "b.events", 0, 3, ["b.changelog"]),  # lost: its session lapsed
        return_exceptions=True,
    )
    assert all(isinstance(result, TransactionFailed) for result in results)
    kinds = [call[0] for call in made[0].calls]
    assert kinds.count("begin") == 1 and "commit" not in kinds and kinds[-1] == "abort"


async def test_a_group_that_keeps_moving_fails_the_transaction_after_its_tries():
    refusals = [generation_moved() for _ in range(GENERATION_TRIES + 1)]
    transactions, made = group(linger_s=0.01, holds=lambda _: True, refuse_offsets=refusals)
    with pytest.raises(TransactionFailed):
        await asyncio.wait_for(block(transactions, "a.events", 0, 1, ["a.changelog"]), 30)
    kinds = [call[0] for call in made[0].calls]
    assert kinds.count("begin") == GENERATION_TRIES + 1 and "commit" not in kinds


async def test_a_transaction_whose_records_are_refused_when_written_again_is_aborted_and_fails():
    refused = KafkaException(RdKafkaError(RdKafkaError.INVALID_TXN_STATE, "not in a transaction"))
    transactions, made = group(
        linger_s=0.01,
        holds=lambda _: True,
        refuse_offsets=[generation_moved()],
        refuse_after_abort=refused,
    )
    with pytest.raises(TransactionFailed):
        await asyncio.wait_for(block(transactions, "a.events", 0, 1, ["a.changelog"]), 10)
    kinds = [call[0] for call in made[0].calls]
    assert kinds == ["init", "begin", "produce", "offsets", "abort", "begin", "abort"]
    await block(transactions, "a.events", 0, 1, [])  # the producer serves the next transaction
    assert made[0].calls[-1] == ("commit",)


def sequence_gap() -> KafkaException:
    """How librdkafka fails a transaction on records an abort purged (OUT_OF_ORDER_SEQUENCE)."""
    state = -172  # librdkafka's RD_KAFKA_RESP_ERR__STATE
    return KafkaException(RdKafkaError(state, "Erroneous state"))


async def test_a_transaction_written_again_that_fails_on_the_aborts_gap_is_written_once_more():
    transactions, made = group(
        linger_s=0.01, holds=lambda _: True, refuse_offsets=[generation_moved(), sequence_gap()]
    )
    await asyncio.wait_for(block(transactions, "a.events", 0, 10, ["a.changelog"]), 10)
    kinds = [call[0] for call in made[0].calls]
    tried = ["begin", "produce", "offsets", "abort"]
    assert kinds == ["init", *tried, *tried, "begin", "produce", "offsets", "commit"]
    assert transactions.transactions == 1


async def test_a_transaction_begun_after_an_abort_is_written_again_once_for_a_failure_of_its_own():
    transactions, made = group(linger_s=0.01, holds=lambda _: True)
    participant = transactions.participant(TopicPartition("a.events", 0))

    async def failing() -> None:
        async with participant.transaction():
            raise KafkaError("a send failed")

    with pytest.raises(KafkaError):
        await failing()
    made[0].refuse_offsets = [sequence_gap()]
    await asyncio.wait_for(block(transactions, "a.events", 0, 3, ["a.changelog"]), 10)
    assert [call[0] for call in made[0].calls].count("begin") == 3 and made[0].calls[-1] == ("commit",)
    # The next one began after a commit: a failure of its own fails it, with no second writing.
    made[0].refuse_offsets = [sequence_gap()]
    with pytest.raises(TransactionFailed):
        await asyncio.wait_for(block(transactions, "a.events", 0, 4, ["a.changelog"]), 10)
    assert [call[0] for call in made[0].calls].count("begin") == 4
    # After that abort, the same failure twice: written again once only, then it fails.
    made[0].refuse_offsets = [sequence_gap(), sequence_gap()]
    with pytest.raises(TransactionFailed):
        await asyncio.wait_for(block(transactions, "a.events", 0, 5, ["a.changelog"]), 10)
    assert [call[0] for call in made[0].calls].count("begin") == 6


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


async def test_a_commits_calls_are_given_no_longer_than_their_transaction_has_left():
    transactions, made = group(linger_s=0.01)
    await block(transactions, "a.events", 0, 7, ["a.changelog"])
    assert len(made[0].timeouts) == 2  # the offsets, the commit
    assert all(0 < timeout <= TRANSACTION_TIMEOUT_MS / 1000 for timeout in made[0].timeouts)


async def test_a_retriable_refusal_is_not_tried_again_once_the_transaction_is_past_its_timeout(monkeypatch):
    # Its coordinator aborts it from then on: a commit can only fail.
    monkeypatch.setattr(transactions, "TRANSACTION_TIMEOUT_MS", 0)
    loading = 14  # COORDINATOR_LOAD_IN_PROGRESS
    refused = KafkaException(RdKafkaError(loading, "coordinator load in progress", retriable=True))
    group_transactions, made = group(linger_s=0.01, fail_offsets_once=refused)
    with pytest.raises(TransactionFailed):
        await block(group_transactions, "a.events", 0, 7, ["a.changelog"])
    kinds = [call[0] for call in made[0].calls]
    assert kinds == ["init", "begin", "produce", "offsets refused", "abort"]


async def test_a_call_still_out_past_its_timeout_fences_the_blocks_and_a_new_producer_serves_on(monkeypatch):
    # librdkafka's send_offsets_to_transaction can block past its timeout once the group's
    # coordinator is lost: its producer is left to it and never called again.
    monkeypatch.setattr(transactions, "TRANSACTION_TIMEOUT_MS", 100)
    monkeypatch.setattr(transactions, "MIN_CALL_S", 0.05)
    monkeypatch.setattr(calls, "WEDGED_AFTER_S", 0.05)
    held = threading.Event()
    group_transactions, made = group(linger_s=0.01, hold_offsets=[held])
    try:
        results = await asyncio.wait_for(
            asyncio.gather(
                block(group_transactions, "a.events", 0, 1, ["a.changelog"]),
                block(group_transactions, "b.events", 0, 1, ["b.changelog"]),
                return_exceptions=True,
            ),
            10,
        )
        assert all(isinstance(result, ProducerFenced) for result in results), results
        await until(lambda: len(made) == 2 and made[1].calls == [("init",)], 5, "a new producer started")
        await block(group_transactions, "a.events", 0, 1, ["a.changelog"])
        assert [call[0] for call in made[1].calls] == ["init", "begin", "produce", "offsets", "commit"]
    finally:
        held.set()
    wedged_calls = [call[0] for call in made[0].calls]
    assert wedged_calls[-1] == "offsets held" and "abort" not in wedged_calls and "purge" not in wedged_calls
    await group_transactions.close()
