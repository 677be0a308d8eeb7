"""The commit of a partition batch, without a broker: its pure plan, a failed transaction, a fenced
producer and a rebalance, against the fake producer of fake_kafka.py, the batches committed by
a real partition task (fake_tasks.py) and, for rebalances, a real pipeline."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from stallwatch.contract.commands import decode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.settings import Settings
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.commit import (
    AbortedForAnother,
    CommitOutcome,
    Committed,
    Failed,
    Fenced,
    Write,
    plan_commit,
)
from stallwatch_streams.worker.pipeline import Pipeline
from stallwatch_streams.worker.store import POSITION_KEY, PartitionStates, encode_position
from stallwatch_streams.worker.task_context import Restore
from stallwatch_streams.worker.task_state import TaskState
from tests.script import RunScript
from tests.streams.worker.fake_kafka import FakeConsumer, FakeProducer, consumer_records
from tests.streams.worker.fake_tasks import (
    SOURCE,
    TOPICS,
    FakePartition,
    FakePipeline,
    committed_changelog,
    nothing_committed,
)
from tests.waiting import until


def looping_run() -> list[SourceMessage]:
    """A run that repeats one call: allowed, then refused, over two batches."""
    script = RunScript("r1")
    script.start_round()
    for _ in range(6):
        script.call("search", {"q": 1}, status="ok", result="same")
    return [SourceMessage(b"r1", line, 0, i) for i, line in enumerate(script.lines())]


def test_the_plan_writes_commands_letters_states_tombstones_and_tallies_then_the_next_offset():
    messages = [*looping_run()[:4], SourceMessage(b"r1", b"{", 0, 4)]
    result = BatchApplier(Detector(), "events").apply(messages, lambda run_id: None, PartitionClock(), 0.0)
    result.tallies.append((b"tenant|search", b"{}"))
    plan = plan_commit(TOPICS, SOURCE, result, ["old"], 5)
    assert [w.topic for w in plan.writes] == [
        "commands",
        "deadletter",
        "changelog",
        "changelog",
        "tallies",
        "changelog",
    ]
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


async def test_a_failed_transaction_leaves_nothing_visible_and_the_partition_is_rebuilt():
    messages = looping_run()
    first, second = messages[:5], messages[5:]
    reference = await FakePartition().serve()
    assert await reference.commit(first)
    assert await reference.commit(second)

    p = await FakePartition().serve()
    await p.commit(first)
    before = list(p.committed.visible), dict(p.committed.offsets)
    p.task.producer = FakeProducer(fail_commit=KafkaConnectionError("the broker went away"))
    assert not await p.commit(second)
    assert (p.committed.visible, p.committed.offsets) == before  # nothing of the batch visible
    assert p.started == p.restores == 1 and p.retries == 1
    assert p.task.state is TaskState.RUNNING and p.task.producer is p.committed
    # The detector had changed the run's state in place; the rebuild brought back the committed one.
    assert p.task.states.load("r1").last_offset == first[-1].offset
    # Read again, the batch gives exactly what it gives without the failure.
    assert await p.commit(second)
    assert p.committed.visible == reference.committed.visible
    assert p.committed.offsets == reference.committed.offsets == {SOURCE: len(messages)}
    assert any(decode_command(v).decision == "refuse" for _, v in p.committed.records("commands"))


async def test_a_commit_says_how_it_went_and_leaves_what_follows_to_the_task():
    p = await FakePartition().serve()
    committer, task, messages = p.committer, p.task, looping_run()

    async def commit(records: list[SourceMessage]) -> CommitOutcome:
        return await committer.commit(task, [await committer.apply(task, records)])

    committed = await commit(messages[:3])
    assert isinstance(committed, Committed) and committed.plan.next_offset == 3 == task.states.position
    task.producer = FakeProducer(fail_commit=KafkaConnectionError("the broker went away"))
    failed = await commit(messages[3:])
    assert isinstance(failed, Failed) and failed.attempt == 1 and not failed.final
    assert not Failed(failed.error, 5).final and Failed(failed.error, 6).final
    # The committer rebuilds nothing: the task is as it was, its states ahead of what committed.
    assert task.state is TaskState.RUNNING and p.started == p.restores == 0
    assert task.states.position == 3 and task.ledger.failures == 1
    task.producer = FakeProducer(fail_commit=ProducerFenced())
    young = await commit(messages[3:])
    assert isinstance(young, Fenced) and not young.past_timeout
    committer.transaction_timeout_s = 0.0  # every transaction is past it
    old = await commit(messages[3:])
    assert isinstance(old, Fenced) and old.past_timeout
    task.producer = p.committed
    assert isinstance(await commit(messages[3:]), Committed) and task.ledger.failures == 0


async def test_a_transaction_aborted_for_another_partitions_part_never_ends_the_worker():
    p = await FakePartition().serve()
    shared = p.task.producer = p.producer = FakeProducer(fail_commit=AbortedForAnother("b's part failed"))
    for _ in range(8):  # past the failures in a row that end the worker
        assert not await p.commit(looping_run())
    assert p.restores == 8 and p.committed.visible == [] and shared.transactions == 8
    assert p.task.ledger.failures == 0


async def test_a_batch_that_keeps_failing_ends_the_worker():
    p = await FakePartition().serve()
    failing = p.task.producer = p.producer = FakeProducer(fail_commit=KafkaConnectionError("down"))
    for _ in range(5):
        assert not await p.commit(looping_run())
    with pytest.raises(KafkaConnectionError):
        await p.commit(looping_run())
    assert p.restores == 5 and p.committed.visible == [] and failing.transactions == 6


async def pipeline_of(
    producer: FakeProducer,
    restore: Restore = nothing_committed,
) -> tuple[Pipeline, FakeConsumer, list[int]]:
    """A pipeline serving partition 0 of `events` with fakes, on `producer`, the looping run
    queued to it; the list counts the producers started after that (each a new FakeProducer)."""
    fakes = FakePipeline(Settings(topic_prefix="t"), producer, restore=restore)
    pipeline = await fakes.assigned()
    fakes.consumer.queued.append(
        {fakes.tp: consumer_records(fakes.tp.topic, 0, b"r1", [m.value for m in looping_run()])}
    )
    return pipeline, fakes.consumer, fakes.started


def in_state(pipeline: Pipeline, state: TaskState) -> bool:
    """Whether partition 0's task is in `state` (SUSPENDED: a revocation has reached it)."""
    task = pipeline.tasks.get(0)
    return task is not None and task.state is state


async def test_a_fenced_producer_publishes_nothing_and_the_worker_goes_on():
    producer = FakeProducer(fail_commit=ProducerFenced())
    pipeline, _, started = await pipeline_of(producer)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: loop.done() or in_state(pipeline, TaskState.DROPPED), 5, "the fenced task dropped")
    assert not loop.done()  # not ended
    assert producer.visible == [] and producer.offsets == {}
    assert started == []  # not rebuilt: the group says whose it is, in the rebalance it was asked for
    assert pipeline.membership.rejoins == 1
    assert not loop.done()  # the worker serves on
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop


async def test_a_batch_is_never_half_given_up_in_a_rebalance():
    gate = asyncio.Event()
    producer = FakeProducer(gate=gate)
    pipeline, consumer, _ = await pipeline_of(producer)
    loop = asyncio.create_task(pipeline.run())
    await until(pipeline.tasks.committing, 5, "a commit in flight")
    tp = next(iter(consumer.assigned))
    assert tp not in consumer.paused  # pipelined: the partition reads on meanwhile
    revoked = asyncio.create_task(pipeline.on_partitions_revoked([tp]))
    await until(lambda: in_state(pipeline, TaskState.SUSPENDED), 5, "the revoked task suspended")
    assert not revoked.done()  # the rebalance waits for the batch in flight
    assert producer.visible == []
    task = pipeline.tasks.get(0)
    assert task is not None and task.state is TaskState.SUSPENDED
    gate.set()
    await asyncio.wait_for(revoked, 5)
    # Once the partition is given up, its batch is committed whole: every command, the state and
    # the offset after the batch's last record.
    commands = producer.records(pipeline.settings.commands_topic)
    assert len(commands) == 6
    after = encode_position(len(looping_run()), task.states.clock.newest)
    assert producer.records(pipeline.settings.changelog_topic) == [
        (b"r1", task.states.load("r1").to_bytes()),
        (POSITION_KEY, after),
    ]
    assert producer.offsets == {tp: len(looping_run())}
    await pipeline.on_partitions_assigned([tp])
    assert task.state is TaskState.RUNNING and pipeline.tasks.get(0) is task  # kept
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop


async def timed_out_partition(timeout_s: float) -> FakePartition:
    """Partition 0 whose fencings past `timeout_s` may be the broker's abort for its age."""
    p = await FakePartition().serve()
    p.committer.transaction_timeout_s = timeout_s
    return p


@pytest.mark.parametrize("commit_s", [0.0, 0.1], ids=["young", "past the timeout"])
async def test_a_fencing_goes_to_the_group_not_up(commit_s: float):
    p = await timed_out_partition(timeout_s=0.05)
    gate = asyncio.Event()
    p.task.producer = fenced = FakeProducer(fail_commit=ProducerFenced(), gate=gate)
    asyncio.get_running_loop().call_later(commit_s, gate.set)
    assert not await p.commit(looping_run())
    # Dropped, its producer closed, paused: not rebuilt until the group has had its say.
    assert p.task.state is TaskState.DROPPED and fenced.stopped and not p.task.has_states
    assert p.started == p.restores == 0 and not p.committed.visible and p.retries == 1
    assert SOURCE in p.consumer.paused and p.membership.rejoins == 1


@pytest.mark.parametrize(
    "error", [ProducerFenced(), KafkaConnectionError("gone")], ids=["fenced", "connection lost"]
)
async def test_a_send_that_failed_mid_transaction_is_the_outcome_not_the_refusals_after_it(error):
    # aiokafka leaves the transaction when a send fails and refuses the later sends
    # (IllegalOperation): the send's own error says what happened. A fencing so met goes to
    # the group; a rebuild would start a producer that fences the partition's new owner.
    p = await FakePartition().serve()
    p.task.producer = FakeProducer(fail_send=error)
    assert not await p.commit(looping_run())
    if isinstance(error, ProducerFenced):
        assert p.task.state is TaskState.DROPPED and p.membership.rejoins == 1 and p.started == 0
    else:
        assert p.task.state is TaskState.RUNNING and p.membership.rejoins == 0 and p.started == 1
    assert not p.committed.visible


async def test_the_group_offsets_ride_along_at_most_once_an_interval_the_position_always():
    p = await FakePartition().serve()
    p.committer.group_offsets_interval_s = 3600.0
    messages = looping_run()
    await p.commit(messages[:3])
    await p.commit(messages[3:])
    assert p.committed.offsets == {SOURCE: 3}  # the first batch's; the second's not yet
    assert committed_changelog(p.committed)[1] == len(messages) == p.task.states.position


async def test_an_assignment_seeks_every_partition_to_its_committed_position():
    pipeline, consumer, started = await pipeline_of(FakeProducer())
    tp = next(iter(consumer.assigned))
    task = pipeline.tasks.get(0)
    assert task is not None
    task.states.position = 42  # committed by this worker since the group's offset (7)
    consumer.committed_offsets[tp] = 7
    await pipeline.on_partitions_assigned([tp])
    assert consumer.seeks == [(tp, 42)] and started == []  # kept: not rebuilt, but repositioned
    assert pipeline.tasks.get(0) is task


async def test_an_assignment_closes_the_tasks_of_the_partitions_given_away():
    pipeline, consumer, started = await pipeline_of(FakeProducer())
    kept, lost = TopicPartition(pipeline.settings.events_topic, 1), next(iter(consumer.assigned))
    consumer.assigned = {lost, kept}
    await pipeline.on_partitions_revoked([lost])
    await pipeline.on_partitions_assigned([lost, kept])
    task = pipeline.tasks.get(lost.partition)
    assert task is not None and started == [1]
    producer = task.producer
    assert isinstance(producer, FakeProducer)
    await pipeline.on_partitions_revoked([lost, kept])
    await pipeline.on_partitions_assigned([kept])
    assert task.state is TaskState.CLOSED and producer.stopped and not task.has_states
    assert pipeline.tasks.get(lost.partition) is None and len(pipeline.tasks) == 1


async def test_a_transaction_failed_during_a_rebalance_is_restored_only_when_the_group_gives_it_back():
    """Rebuilt at once, a new producer could fence the member the group gave the partition to
    while this one was late to rejoin; dropped, the assignment decides."""
    gate = asyncio.Event()
    producer = FakeProducer(gate=gate, fail_commit=KafkaConnectionError("the broker went away"))
    restored: list[list[int]] = []

    async def restore(partitions: list[int], tick: object) -> dict[int, PartitionStates]:
        restored.append(partitions)
        return await nothing_committed(partitions, tick)

    pipeline, consumer, started = await pipeline_of(producer, restore)
    restored.clear()
    loop = asyncio.create_task(pipeline.run())
    await until(pipeline.tasks.committing, 5, "a commit in flight")
    tp = next(iter(consumer.assigned))
    revoked = asyncio.create_task(pipeline.on_partitions_revoked([tp]))
    await until(
        lambda: in_state(pipeline, TaskState.SUSPENDED), 5, "the revoked task suspended"
    )  # waiting for the commit
    gate.set()
    await asyncio.wait_for(revoked, 5)
    assert started == [] and restored == []  # no producer of the partition started meanwhile
    task = pipeline.tasks.get(0)
    assert task is not None and task.state is TaskState.DROPPED
    assert not task.has_states and task.producer is None and task.held
    await pipeline.on_partitions_assigned([tp])  # the group gives it back
    assert started == [0] and restored == [[0]] and task.has_states
    assert task.state is TaskState.RUNNING and not task.held  # served again
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
