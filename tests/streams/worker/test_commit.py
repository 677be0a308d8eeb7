"""The commit of a partition batch, without a broker: its pure plan, a failed transaction, a fenced
producer and a rebalance, against the fake producer of fake_kafka.py."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from stallwatch.contract.commands import decode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.metrics import StallwatchMetrics
from stallwatch.settings import Settings
from streams.worker.batch import BatchApplier, SourceMessage
from streams.worker.commit import BatchCommitter, CommitTopics, Write, plan_commit
from streams.worker.pipeline import Pipeline
from streams.worker.store import POSITION_KEY, RunStore, decode_position, encode_position
from tests.script import RunScript
from tests.streams.worker.fake_kafka import FakeConsumer, FakeProducer, consumer_records

TOPICS = CommitTopics("commands", "deadletter", "changelog", "tallies")
SOURCE = TopicPartition("events", 0)


def looping_run() -> list[SourceMessage]:
    """A run that repeats one call: allowed, then refused, over two batches."""
    script = RunScript("r1")
    script.start_round()
    for _ in range(6):
        script.call("search", {"q": 1}, status="ok", result="same")
    return [SourceMessage(b"r1", line, 0, i) for i, line in enumerate(script.lines())]


def test_the_plan_writes_commands_letters_states_tombstones_and_tallies_then_the_next_offset():
    messages = [*looping_run()[:4], SourceMessage(b"r1", b"{", 0, 4)]
    result = BatchApplier(Detector(), "events").apply(messages, lambda run_id: None, PartitionClock(),
                                                      0.0)
    result.tallies.append((b"tenant|search", b"{}"))
    plan = plan_commit(TOPICS, SOURCE, result, ["old"], 5)
    assert [w.topic for w in plan.writes] == ["commands", "deadletter", "changelog", "changelog",
                                              "tallies", "changelog"]
    assert decode_command(plan.writes[0].value).run_id == "r1"
    assert plan.writes[2].value == result.states["r1"].to_bytes()
    assert plan.writes[3] == Write("changelog", b"old", None)
    assert plan.writes[4] == Write("tallies", b"tenant|search", b"{}")
    # The position after the batch, in the same transaction as the states it matches.
    assert plan.writes[5] == Write("changelog", POSITION_KEY, b"5")
    assert plan.next_offset == 5 and plan.expired == ["old"] and plan.states == result.states


def test_a_position_key_is_never_a_run_ids_key():
    with pytest.raises(UnicodeDecodeError):
        POSITION_KEY.decode()  # a run id's key is its UTF-8 encoding, so it always decodes


def committed_changelog(producer: FakeProducer) -> tuple[dict[str, bytes], int | None, float | None]:
    """The states, the position and the clock a restore reads from what the fake committed."""
    states: dict[str, bytes] = {}
    position = clock = None
    for key, value in producer.records("changelog"):
        if key == POSITION_KEY:
            position, clock = decode_position(value)
        elif value is None:
            states.pop(key.decode(), None)
        else:
            states[key.decode()] = value
    return states, position, clock


class Partition0:
    """A committer of partition 0 whose rebuild restores the store from what the fake committed."""

    def __init__(self) -> None:
        self.store = RunStore()
        self.store.adopt(0, {})
        self.committed = FakeProducer()  # what Kafka holds, across the producers of the partition
        self.producers = {0: self.committed}
        self.rebuilds = 0
        self.committer = BatchCommitter(BatchApplier(Detector(), "events"), self.store, TOPICS,
                                        "group", self.producers, lambda partition: [],
                                        self.rebuild, lambda: None)

    async def rebuild(self, tp: TopicPartition) -> None:
        self.rebuilds += 1
        self.producers[0] = self.committed
        self.store.adopt(0, *committed_changelog(self.committed))


async def test_a_failed_transaction_leaves_nothing_visible_and_the_partition_is_rebuilt():
    messages = looping_run()
    first, second = messages[:5], messages[5:]
    reference = Partition0()
    assert await reference.committer.commit(SOURCE, first) is not None
    assert await reference.committer.commit(SOURCE, second) is not None

    p = Partition0()
    await p.committer.commit(SOURCE, first)
    before = list(p.committed.visible), dict(p.committed.offsets)
    p.producers[0] = FakeProducer(fail_commit=KafkaConnectionError("the broker went away"))
    assert await p.committer.commit(SOURCE, second) is None
    assert (p.committed.visible, p.committed.offsets) == before  # nothing of the batch visible
    assert p.rebuilds == 1
    # The detector had changed the run's state in place; the rebuild brought back the committed one.
    assert p.store.load(0, "r1").last_offset == first[-1].offset
    # Read again, the batch gives exactly what it gives without the failure.
    assert await p.committer.commit(SOURCE, second) is not None
    assert p.committed.visible == reference.committed.visible
    assert p.committed.offsets == reference.committed.offsets == {SOURCE: len(messages)}
    assert any(decode_command(v).decision == "refuse" for _, v in p.committed.records("commands"))


async def test_a_batch_that_keeps_failing_ends_the_worker():
    p = Partition0()
    failing = FakeProducer(fail_commit=KafkaConnectionError("down"))

    async def rebuild(tp: TopicPartition) -> None:
        p.rebuilds += 1
        p.producers[0] = failing

    p.committer.rebuild = rebuild
    p.producers[0] = failing
    for _ in range(5):
        assert await p.committer.commit(SOURCE, looping_run()) is None
    with pytest.raises(KafkaConnectionError):
        await p.committer.commit(SOURCE, looping_run())
    assert p.rebuilds == 5 and p.committed.visible == []


def pipeline_of(producer: FakeProducer) -> tuple[Pipeline, FakeConsumer, list[int]]:
    """A pipeline serving partition 0 of `events` with fakes; the list counts producers started."""
    started: list[int] = []

    async def start_producer(partition: int) -> FakeProducer:
        started.append(partition)
        return FakeProducer()

    settings = Settings(topic_prefix="t")
    tp = TopicPartition(settings.events_topic, 0)
    consumer = FakeConsumer([tp])
    pipeline = Pipeline(settings, StallwatchMetrics(), Detector(), consumer=consumer,  # type: ignore[arg-type]
                        start_producer=start_producer)
    pipeline.store.adopt(0, {})
    pipeline.producers[0] = producer
    consumer.queued.append({tp: consumer_records(settings.events_topic, 0, b"r1",
                                                 [m.value for m in looping_run()])})
    return pipeline, consumer, started


async def test_a_fenced_producer_ends_the_worker_and_publishes_nothing():
    producer = FakeProducer(fail_commit=ProducerFenced())
    pipeline, _, started = pipeline_of(producer)
    with pytest.raises(ProducerFenced):
        await asyncio.wait_for(pipeline.run(), 5)
    assert producer.visible == [] and producer.offsets == {}
    assert started == []  # not rebuilt: a successor owns the partition now


async def test_a_batch_is_never_half_given_up_in_a_rebalance():
    gate = asyncio.Event()
    producer = FakeProducer(gate=gate)
    pipeline, consumer, _ = pipeline_of(producer)
    loop = asyncio.create_task(pipeline.run())
    while not pipeline.in_flight:
        await asyncio.sleep(0.001)
    tp = next(iter(consumer.assigned))
    assert tp not in consumer.paused  # pipelined: the partition reads on meanwhile
    revoked = asyncio.create_task(pipeline.on_partitions_revoked([tp]))
    await asyncio.sleep(0.05)
    assert not revoked.done()  # the rebalance waits for the batch in flight
    assert producer.visible == []
    gate.set()
    await asyncio.wait_for(revoked, 5)
    # Once the partition is given up, its batch is committed whole: every command, the state and
    # the offset after the batch's last record.
    commands = producer.records(pipeline.settings.commands_topic)
    assert len(commands) == 6
    after = encode_position(len(looping_run()), pipeline.store.clocks[0].newest)
    assert producer.records(pipeline.settings.changelog_topic) == [
        (b"r1", pipeline.store.load(0, "r1").to_bytes()), (POSITION_KEY, after)]
    assert producer.offsets == {tp: len(looping_run())}
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop


class TimedOutPartition0(Partition0):
    """Partition 0 whose fencings past `timeout_s` go to a timed-out handler."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.timed_out: list[TopicPartition] = []

        async def timed_out(tp: TopicPartition) -> None:
            self.timed_out.append(tp)

        self.committer.timed_out, self.committer.transaction_timeout_s = timed_out, timeout_s


async def test_a_fencing_younger_than_the_transaction_timeout_is_a_successors_and_raised():
    p = TimedOutPartition0(timeout_s=60.0)
    p.producers[0] = FakeProducer(fail_commit=ProducerFenced())
    with pytest.raises(ProducerFenced):
        await p.committer.commit(SOURCE, looping_run())
    assert not p.timed_out and p.rebuilds == 0


async def test_a_fencing_past_the_transaction_timeout_goes_to_the_group_not_up():
    p = TimedOutPartition0(timeout_s=0.05)
    gate = asyncio.Event()
    p.producers[0] = FakeProducer(fail_commit=ProducerFenced(), gate=gate)
    asyncio.get_running_loop().call_later(0.1, gate.set)  # the commit outlives the timeout
    assert await p.committer.commit(SOURCE, looping_run()) is None
    assert p.timed_out == [SOURCE] and p.rebuilds == 0 and not p.committed.visible


async def test_the_group_offsets_ride_along_at_most_once_an_interval_the_position_always():
    p = Partition0()
    p.committer.group_offsets_interval_s = 3600.0
    messages = looping_run()
    await p.committer.commit(SOURCE, messages[:3])
    await p.committer.commit(SOURCE, messages[3:])
    assert p.committed.offsets == {SOURCE: 3}  # the first batch's; the second's not yet
    assert committed_changelog(p.committed)[1] == len(messages) == p.store.positions[0]


async def test_an_assignment_seeks_every_partition_to_its_committed_position():
    pipeline, consumer, started = pipeline_of(FakeProducer())
    tp = next(iter(consumer.assigned))
    pipeline.store.positions[0] = 42  # committed by this worker since the group's offset (7)
    consumer.committed_offsets[tp] = 7
    await pipeline.on_partitions_assigned([tp])
    assert consumer.seeks == [(tp, 42)] and started == []  # kept: not rebuilt, but repositioned


async def test_a_transaction_failed_during_a_rebalance_is_restored_only_when_the_group_gives_it_back():
    """Rebuilt at once, a new producer could fence the member the group gave the partition to
    while this one was late to rejoin; dropped, the assignment decides."""
    gate = asyncio.Event()
    producer = FakeProducer(gate=gate, fail_commit=KafkaConnectionError("the broker went away"))
    pipeline, consumer, started = pipeline_of(producer)
    restored: list[list[int]] = []

    async def restore(settings: Settings, partitions: list[int], on_progress: object) -> float:
        restored.append(partitions)
        for partition in partitions:
            pipeline.store.adopt(partition, {})
        return 0.0

    pipeline.store.restore = restore  # type: ignore[method-assign]
    loop = asyncio.create_task(pipeline.run())
    while not pipeline.in_flight:
        await asyncio.sleep(0.001)
    tp = next(iter(consumer.assigned))
    revoked = asyncio.create_task(pipeline.on_partitions_revoked([tp]))
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.wait_for(revoked, 5)
    assert started == [] and restored == []  # no producer of the partition started meanwhile
    assert not pipeline.store.owns(0) and 0 not in pipeline.producers and 0 in pipeline.in_flight
    await pipeline.on_partitions_assigned([tp])  # the group gives it back
    assert started == [0] and restored == [[0]] and pipeline.store.owns(0)
    assert 0 not in pipeline.in_flight  # served again
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
