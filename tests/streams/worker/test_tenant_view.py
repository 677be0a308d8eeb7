"""A tenant's view of its group's consumer (stallwatch_streams/worker/confluent/consumer.py) behaves
as the pipeline expects of aiokafka's consumer: seeks drop what was fetched before them, paused
partitions hold their records, a partition assigned again starts unpaused, and a tenant whose
records wait past the view's bound has its partitions paused until its pipeline takes them. An
idle tenant's loop stays parked on its view, alive while the group's thread goes round, until
records or a failure wake it."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition
from confluent_kafka import TopicPartition as RdTopicPartition

from stallwatch.settings import Settings
from stallwatch_streams.worker.confluent.consumer import FetchBudget, GroupConsumer, TenantView
from stallwatch_streams.worker.confluent.records import Record
from stallwatch_streams.worker.progress import Progress

TOPIC = "t.tenant.acme.events"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


class FakeGroup:
    """The group's side of a view: the operations it was given, applied by no thread."""

    def __init__(self) -> None:
        self.ops: list[Any] = []
        self.failure: BaseException | None = None
        self.went_round = 0.0

    def submit(self, operation: Any, in_callback: bool = True) -> None:
        self.ops.append(operation)

    def resubscribe(self) -> None:
        pass

    def seek_applied(self, tp: TopicPartition) -> None:
        pass


class RecordingConsumer:
    """librdkafka's consumer as the operations call it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []

    def seek(self, tp: Any) -> None:
        self.calls.append(("seek", [(tp.topic, tp.partition, tp.offset)]))

    def pause(self, tps: list[Any]) -> None:
        self.calls.append(("pause", [(tp.topic, tp.partition, -1) for tp in tps]))

    def resume(self, tps: list[Any]) -> None:
        self.calls.append(("resume", [(tp.topic, tp.partition, -1) for tp in tps]))


class Listener:
    def __init__(self, view: TenantView) -> None:
        self.view = view
        self.seen: list[tuple[str, list[int]]] = []

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.seen.append(("revoked", [tp.partition for tp in revoked]))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.seen.append(("assigned", [tp.partition for tp in assigned]))


def records(partition: int, *offsets: int, value: bytes = b"v") -> list[Record]:
    return [Record(TOPIC, partition, offset, 0, 1, b"k", value) for offset in offsets]


def view(
    max_bytes: int = 8 << 20, budget: FetchBudget | None = None, topic: str = TOPIC
) -> tuple[TenantView, FakeGroup]:
    group = FakeGroup()
    budget = budget or FetchBudget(256 << 20)
    budget.views += 1
    return TenantView(group, topic, max_bytes, budget), group  # type: ignore[arg-type]


def applied(group: FakeGroup) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """What the group's thread would call of librdkafka's consumer, in order."""
    consumer = RecordingConsumer()
    for operation in group.ops:
        operation(consumer)
    return consumer.calls


async def test_records_fetched_before_a_seek_are_dropped_and_those_after_it_delivered():
    tenant, group = view()
    tenant.receive(TP0, records(0, 5, 6), seeks=0, highwater=7)
    tenant.seek(TP0, 3)
    tenant.receive(TP0, records(0, 7), seeks=0, highwater=8)  # consumed before the seek applied
    assert await tenant.getmany(timeout_ms=0) == {}
    tenant.receive(TP0, records(0, 3, 4), seeks=1, highwater=8)  # after it
    assert [r.offset for r in (await tenant.getmany(timeout_ms=0))[TP0]] == [3, 4]
    assert tenant.highwater(TP0) == 8
    assert applied(group) == [("seek", [(TOPIC, 0, 3)])]


async def test_a_paused_partition_holds_its_records_until_resumed_and_others_flow():
    tenant, group = view()
    tenant.pause(TP0)
    tenant.receive(TP0, records(0, 1), seeks=0, highwater=None)
    tenant.receive(TP1, records(1, 9), seeks=0, highwater=None)
    assert list(await tenant.getmany(timeout_ms=0)) == [TP1]
    tenant.resume(TP0)
    assert [r.offset for r in (await tenant.getmany(timeout_ms=0))[TP0]] == [1]
    assert [call[0] for call in applied(group)] == ["pause", "resume"]


async def test_a_partition_revoked_and_assigned_again_starts_unpaused_once_its_tenant_took_it():
    tenant, group = view()
    listener = Listener(tenant)
    tenant.subscribe([TOPIC], listener)
    await tenant._assigned([0, 1], [0, 1])  # noqa: SLF001 - what `assigned` schedules
    tenant.pause(TP0)  # a task held it
    await tenant.revoked([0])
    await tenant._assigned([0, 1], [0])  # noqa: SLF001
    assert listener.seen == [("assigned", [0, 1]), ("revoked", [0]), ("assigned", [0, 1])]
    assert tenant.assignment() == {TP0, TP1}
    tenant.receive(TP0, records(0, 2), seeks=0, highwater=None)
    assert list(await tenant.getmany(timeout_ms=0)) == [TP0]
    # Resumed on the thread once its tenant took it (the thread paused it on assignment).
    assert applied(group)[-1] == ("resume", [(TOPIC, 0, -1)])


async def test_a_tenant_whose_records_wait_past_the_bound_is_paused_until_its_pipeline_takes_them():
    tenant, group = view(max_bytes=1000)
    tenant.receive(TP0, records(0, 1, 2, value=b"x" * 400), seeks=0, highwater=None)
    assert applied(group) == []  # 802 bytes wait: under the bound
    tenant.receive(TP1, records(1, 7, value=b"x" * 400), seeks=0, highwater=None)
    assert applied(group) == [("pause", [(TOPIC, 0, -1), (TOPIC, 1, -1)])]
    tenant.resume(TP0)  # the pipeline's own resume does not fetch a held partition again
    assert applied(group) == [("pause", [(TOPIC, 0, -1), (TOPIC, 1, -1)])]
    taken = await tenant.getmany(timeout_ms=0)
    assert {tp: [r.offset for r in rs] for tp, rs in taken.items()} == {TP0: [1, 2], TP1: [7]}
    assert applied(group)[-1][0] == "resume"
    assert sorted(applied(group)[-1][1]) == [(TOPIC, 0, -1), (TOPIC, 1, -1)]


async def test_a_held_partition_the_pipeline_paused_stays_paused_when_the_view_lets_go():
    tenant, group = view(max_bytes=1000)
    tenant.receive(TP0, records(0, 1, value=b"x" * 600), seeks=0, highwater=None)
    tenant.receive(TP1, records(1, 1, value=b"x" * 600), seeks=0, highwater=None)
    tenant.pause(TP1)  # a task being rebuilt holds it
    assert list(await tenant.getmany(timeout_ms=0)) == [TP0]
    # 602 bytes of TP1's still wait: over half the bound, nothing fetched again yet.
    assert [call[0] for call in applied(group)] == ["pause", "pause"]
    tenant.seek(TP1, 1)  # its task reads it again from its position: what waited is dropped
    assert await tenant.getmany(timeout_ms=0) == {}
    assert applied(group)[-1] == ("resume", [(TOPIC, 0, -1)])


async def test_while_the_group_is_over_its_budget_a_tenant_keeps_no_more_than_its_fair_share():
    budget = FetchBudget(2000)
    quiet_topic = "t.tenant.quiet.events"
    loud, loud_group = view(max_bytes=1 << 20, budget=budget)
    quiet, quiet_group = view(max_bytes=1 << 20, budget=budget, topic=quiet_topic)
    loud.receive(TP0, records(0, 1, 2, 3, value=b"x" * 700), seeks=0, highwater=None)
    # 2,103 bytes wait in the group, past its 2,000: the loud tenant, over its fair share of
    # 1,000, is paused; the quiet one, under it, is fetched on.
    assert budget.waiting == 2103 and applied(loud_group) == [("pause", [(TOPIC, 0, -1)])]
    quiet_tp = TopicPartition(quiet_topic, 0)
    quiet.receive(quiet_tp, [Record(quiet_topic, 0, 1, 0, 1, b"k", b"x" * 100)], seeks=0, highwater=None)
    assert applied(quiet_group) == []
    assert [r.offset for r in (await loud.getmany(timeout_ms=0))[TP0]] == [1, 2, 3]
    # Taken: the group is under its budget again and the loud tenant is fetched again.
    assert budget.waiting == 101 and applied(loud_group)[-1] == ("resume", [(TOPIC, 0, -1)])
    loud.forget_waiting()
    quiet.forget_waiting()
    assert budget.waiting == 0


async def test_a_parked_loop_is_alive_while_the_group_goes_round_and_records_wake_it():
    tenant, group = view()
    progress = Progress(clock=lambda: 1000.0)
    progress.tick()  # the loop went round at 1000, then parks
    tenant.progress = progress
    parked = asyncio.create_task(tenant.getmany(timeout_ms=100))
    while progress.waiting is None:
        await asyncio.sleep(0)
    group.went_round = 1990.0  # the group's thread went round long after the loop last did
    assert progress.stalled_for() == -990.0  # not stalled: the thread's beat is the loop's
    group.went_round = 900.0
    assert progress.stalled_for() == 0.0  # a thread behind the loop's own beat changes nothing
    tenant.receive(TP1, records(1, 4), seeks=0, highwater=None)
    assert [r.offset for r in (await parked)[TP1]] == [4]
    assert progress.waiting is None  # round again: its own beat from now on


async def test_a_failure_said_before_the_loop_parks_wakes_it_at_once():
    tenant, _ = view()
    tenant.wake()  # the pipeline failed while the loop applied a batch
    # Parked, it would wait PARKED_WAKE_S (10 s) for records that never come.
    assert await asyncio.wait_for(tenant.getmany(timeout_ms=100), 5.0) == {}


async def test_a_failure_wakes_a_parked_loop():
    tenant, _ = view()
    parked = asyncio.create_task(tenant.getmany(timeout_ms=100))
    await asyncio.sleep(0)
    assert not parked.done()
    tenant.wake()
    assert await asyncio.wait_for(parked, 5.0) == {}


class RdConsumer:
    """librdkafka's consumer as a rebalance callback calls it."""

    def incremental_assign(self, partitions: list[Any]) -> None:
        pass

    def incremental_unassign(self, partitions: list[Any]) -> None:
        pass

    def pause(self, partitions: list[Any]) -> None:
        pass

    def resume(self, partitions: list[Any]) -> None:
        pass

    def consumer_group_metadata(self) -> str:
        return "generation-1"


async def test_a_revocation_holds_its_partitions_until_it_let_them_go_and_a_loss_does_not():
    """What a transaction written again after a generation moved asks (`GroupConsumer.holds`): a
    revoked partition is this member's to commit offsets for until its tenant let it go; a lost
    one (the session lapsed) is not, so a zombie's offsets are never written again."""
    group = GroupConsumer(Settings(topic_prefix="t"), "t-detector.tenants-0", None)
    group._loop = asyncio.get_running_loop()  # noqa: SLF001 - what `start` sets, without the thread
    tenant = group.view(TOPIC)
    held: list[bool] = []

    class Holding:
        async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            held.append(group.holds(revoked))  # the batches in flight commit here

        async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            pass

    tenant.listener = Holding()
    consumer = RdConsumer()
    group._on_assign(consumer, [RdTopicPartition(TOPIC, 0), RdTopicPartition(TOPIC, 1)])  # noqa: SLF001
    assert group.holds([TP0, TP1])
    # The callbacks run on the group's thread, and wait for the tenant's revocation on the loop.
    await asyncio.to_thread(group._on_revoke, consumer, [RdTopicPartition(TOPIC, 0)])  # noqa: SLF001
    await asyncio.to_thread(group._on_lost, consumer, [RdTopicPartition(TOPIC, 1)])  # noqa: SLF001
    assert held == [True, False]
    assert not group.holds([TP0]) and not group.holds([TP1])
