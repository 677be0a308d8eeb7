"""A partition task without a broker: its transitions as its methods take them, and its commit loop
(batches applied during a transaction join the next one; past the bound the partition is paused;
a failed commit discards what is pending; a failed or cancelled commit is the loop's failure)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, ProducerFenced

from stallwatch_streams.worker import retry
from stallwatch_streams.worker.batch import BatchResult
from stallwatch_streams.worker.commit import (
    Applied,
    CommitOutcome,
    CommitPartition,
    Committed,
    Failed,
    Fenced,
)
from stallwatch_streams.worker.store import PartitionStates
from stallwatch_streams.worker.task import PENDING_MAX_RECORDS, PartitionTask, ReadFrom
from stallwatch_streams.worker.task_state import InvalidTransition, TaskState
from stallwatch_streams.worker.tasks import PartitionTasks
from tests.streams.worker.fake_kafka import FakeProducer
from tests.streams.worker.fake_tasks import SOURCE, FakePartition
from tests.waiting import until

TP = SOURCE
FAILED = Failed(KafkaConnectionError("the broker went away"), attempt=1)
FENCED = Fenced(ProducerFenced(), past_timeout=False)
TIMED_OUT = Fenced(ProducerFenced(), past_timeout=True)


def batch(last_offset: int, records: int = 1, ahead: bool = False) -> Applied:
    return Applied(records, last_offset, BatchResult(), None, [], 0.0, ahead)  # type: ignore[arg-type]


class Commits:
    """A committer that waits for `gate` and records the batches of each transaction, which end
    as `outcome` says (committed, unless it is set)."""

    def __init__(self, outcome: CommitOutcome | None = None) -> None:
        self.gate = asyncio.Event()
        self.outcome = outcome
        self.transactions: list[list[int]] = []
        self.observed: list[int] = []
        self.transaction_timeout_s = 15.0  # what a fencing past the timeout says

    async def commit(self, partition: CommitPartition, batches: Sequence[Applied]) -> CommitOutcome:
        self.transactions.append([b.last_offset for b in batches])
        await self.gate.wait()
        return self.outcome or Committed(None)  # type: ignore[arg-type]

    def observe(self, tp: object, applied: Applied) -> None:
        self.observed.append(applied.last_offset)


async def serving(commits: Commits, commit_interval_s: float = 0.0) -> FakePartition:
    p = FakePartition(observe=commits.observe)
    p.context.committer = commits  # type: ignore[assignment]
    p.context.settings = p.context.settings.model_copy(update={"commit_interval_s": commit_interval_s})
    return await p.serve()


async def settled(task: PartitionTask) -> None:
    while (loop := task.commit_loop) is not None:
        await asyncio.gather(loop, return_exceptions=True)
    await asyncio.sleep(0)  # a turn of the loop, for the done callbacks: no wait on the clock


# -- transitions -----------------------------------------------------------------------------


async def test_an_assigned_task_is_fenced_restored_and_runs():
    p = FakePartition()
    assert p.task.state is TaskState.CREATED and p.task.held and not p.task.has_states
    await p.task.fence()
    assert p.task.state is TaskState.RESTORING and p.task.producer is p.committed
    p.task.restored(PartitionStates(position=12))
    assert p.task.state is TaskState.RUNNING and not p.task.held
    p.task.assigned_again()
    assert p.consumer.seeks == [(TP, 12)]


async def test_a_revoked_task_is_suspended_and_runs_again_from_its_position_when_kept():
    p = await FakePartition().serve()
    p.task.suspend()
    assert p.task.state is TaskState.SUSPENDED and not p.task.held  # batches in flight commit
    p.task.add(batch(0))  # a batch applied before the rebalance took the lock is still committed
    p.task.states.position = 7
    p.task.assigned_again()
    assert p.task.state is TaskState.RUNNING and p.consumer.seeks == [(TP, 7)]
    await settled(p.task)


async def test_a_task_restored_while_a_rebalance_is_under_way_waits_suspended():
    p = FakePartition()
    await p.task.fence()
    p.membership.revoking = True
    p.task.restored(PartitionStates())
    assert p.task.state is TaskState.SUSPENDED


async def test_a_failed_transaction_rebuilds_the_task():
    commits = Commits(FAILED)
    p = await serving(commits)
    p.task.add(batch(0))
    await until(lambda: commits.transactions, 5, "batch 0's transaction began")
    p.task.add(batch(1))  # applied on top of batch 0
    epoch = p.task.epoch
    commits.gate.set()
    await settled(p.task)
    assert p.task.state is TaskState.RUNNING and p.task.epoch == epoch + 2
    assert p.started == p.restores == 1 and p.retries == 1
    assert commits.transactions == [[0]] and commits.observed == []  # batch 1 never committed
    assert TP not in p.consumer.paused and p.membership.failure is None


async def test_a_failure_that_keeps_coming_ends_the_worker():
    outcome = Failed(KafkaConnectionError("again"), attempt=6)
    commits = Commits(outcome)
    p = await serving(commits)
    p.task.add(batch(0))
    commits.gate.set()
    await settled(p.task)
    assert p.membership.failure is outcome.error and TP in p.consumer.paused
    assert p.task.state is TaskState.RUNNING and p.started == p.restores == 0  # not rebuilt


async def test_a_transaction_failed_during_a_rebalance_drops_the_task():
    commits = Commits(FAILED)
    p = await serving(commits)
    p.task.add(batch(0))
    p.membership.revoking = True
    p.task.suspend()
    old = p.task.producer
    commits.gate.set()
    await settled(p.task)
    assert p.task.state is TaskState.DROPPED and p.task.held and not p.task.has_states
    assert p.task.producer is None and isinstance(old, FakeProducer) and old.stopped
    assert p.started == p.restores == 0 and TP in p.consumer.paused


@pytest.mark.parametrize("outcome", [FENCED, TIMED_OUT], ids=["young", "past the timeout"])
async def test_a_fenced_task_is_dropped_and_the_group_asked_and_the_assignment_that_follows_rebuilds_it(
    outcome,
):
    commits = Commits(outcome)
    p = FakePartition(observe=commits.observe)
    p.context.committer = commits  # type: ignore[assignment]
    tasks = PartitionTasks(p.context)
    await tasks.assign([TP])
    task = tasks.get(TP.partition)
    assert task is not None and task.state is TaskState.RUNNING
    started, restores = p.started, p.restores
    task.add(batch(0))
    commits.gate.set()
    await settled(task)
    assert task.state is TaskState.DROPPED and TP in p.consumer.paused and task.producer is None
    assert p.membership.rejoins == 1 and p.membership.failure is None
    assert (p.started, p.restores) == (started, restores)  # nothing started before the group spoke
    commits.outcome = None
    await tasks.assign([TP])  # the group gives it back
    assert tasks.get(TP.partition) is task and task.state is TaskState.RUNNING
    assert (p.started, p.restores) == (started + 1, restores + 1)
    # Read on: a cooperative assignment that keeps the partition does not unpause it for the task.
    assert TP not in p.consumer.paused
    await tasks.assign([])  # or the group gives it away: closed
    assert task.state is TaskState.CLOSED and len(tasks) == 0


async def test_a_task_fenced_while_the_worker_stops_asks_the_group_nothing():
    commits = Commits(FENCED)
    p = await serving(commits)
    p.task.add(batch(0))
    p.membership.stopping = True
    commits.gate.set()
    await settled(p.task)
    assert p.task.state is TaskState.DROPPED and p.membership.rejoins == 0


@pytest.mark.parametrize(
    "state",
    [TaskState.CREATED, TaskState.RESTORING, TaskState.RUNNING, TaskState.SUSPENDED, TaskState.DROPPED],
)
async def test_a_task_closes_from_any_state_its_producer_and_states_let_go(state: TaskState):
    p = FakePartition()
    if state is TaskState.RESTORING:
        await p.task.fence()  # assigned, fenced; the changelog not read yet
    elif state is not TaskState.CREATED:
        await p.serve()
    if state is TaskState.SUSPENDED:
        p.task.suspend()
    elif state is TaskState.DROPPED:
        commits = Commits(FAILED)
        p.context.committer = commits  # type: ignore[assignment]
        p.membership.revoking = True
        p.task.add(batch(0))
        commits.gate.set()
        await settled(p.task)
    assert p.task.state is state
    await p.task.close()
    assert p.task.state is TaskState.CLOSED and p.task.producer is None and not p.task.has_states
    assert p.committed.stopped == (state is not TaskState.CREATED)  # dropped: closed before
    with pytest.raises(InvalidTransition):
        await p.task.close()


async def test_a_batch_for_a_task_that_does_not_serve_is_refused():
    p = FakePartition()
    with pytest.raises(InvalidTransition):
        p.task.add(batch(0))


async def test_records_fetched_before_the_task_changed_are_read_again_from_where_it_stands():
    p = await FakePartition().serve()
    p.task.states.position = 40
    epoch = p.task.epoch
    assert p.task.admission(50, epoch) == "apply"
    p.task.add(batch(55))
    assert p.task.admission(60, epoch + 3) == ReadFrom(56)  # after its last applied
    assert p.task.admission(60, None) == ReadFrom(56)  # fetched before the task was made
    assert p.task.takes(epoch) and not p.task.takes(epoch + 3)
    await settled(p.task)


async def test_a_rebalance_moves_the_epoch_and_reads_on_from_the_committed_position():
    p = await FakePartition().serve()
    p.task.add(batch(55))
    await settled(p.task)
    p.task.states.position = 56
    fetched_under = p.task.epoch
    p.task.suspend()
    assert p.task.admission(56, fetched_under) == "apply"  # a revocation is not a change yet
    p.task.moved_on()  # the revocation's batches settled, under the pipeline's lock
    assert p.task.admission(70, fetched_under) == ReadFrom(56)  # from the group's lagging offset
    fetched_under = p.task.epoch
    p.task.assigned_again()  # kept in the assignment: moved on again
    assert p.task.admission(56, fetched_under) == ReadFrom(56)
    assert not p.task.takes(fetched_under)
    assert p.task.admission(56, p.task.epoch) == "apply"


async def test_a_task_without_a_position_reads_on_from_where_the_fetch_began():
    p = await FakePartition().serve()
    fetched_under = p.task.epoch
    p.task.assigned_again()
    assert p.task.admission(30, fetched_under) == ReadFrom(30)


# -- the commit loop -------------------------------------------------------------------------


async def test_batches_applied_during_a_transaction_join_the_next_one_unpaused():
    commits = Commits()
    p = await serving(commits)
    p.task.add(batch(0))
    await until(lambda: commits.transactions, 5, "batch 0's transaction began")
    p.task.add(batch(1))
    p.task.add(batch(2))
    assert TP not in p.consumer.paused and p.task.commit_loop is not None  # not paused meanwhile
    commits.gate.set()
    await settled(p.task)
    assert commits.transactions == [[0], [1, 2]] and commits.observed == [0, 1, 2]
    assert p.task.commit_loop is None and p.membership.failure is None and p.task.next_offset == 3


async def test_a_partition_past_the_bound_of_pending_records_is_paused_until_its_commit():
    commits = Commits()
    p = await serving(commits)
    p.task.add(batch(0))
    await until(lambda: commits.transactions, 5, "batch 0's transaction began")
    p.task.add(batch(PENDING_MAX_RECORDS, PENDING_MAX_RECORDS))
    assert TP in p.consumer.paused
    commits.gate.set()
    await settled(p.task)
    assert TP not in p.consumer.paused and commits.transactions == [[0], [PENDING_MAX_RECORDS]]


async def test_a_cancelled_commit_is_a_failure_and_leaves_its_partition_paused():
    commits = Commits()
    p = await serving(commits)
    p.task.add(batch(0))
    await until(lambda: commits.transactions, 5, "batch 0's transaction began")
    loop = p.task.commit_loop
    assert loop is not None
    loop.cancel()
    await settled(p.task)
    assert isinstance(p.membership.failure, asyncio.CancelledError)
    assert TP in p.consumer.paused


async def test_a_failed_commit_is_the_loops_failure():
    p = await FakePartition().serve()

    class Raises:
        async def commit(self, partition: CommitPartition, batches: Sequence[Applied]) -> CommitOutcome:
            raise RuntimeError("boom")

    p.context.committer = Raises()  # type: ignore[assignment]
    p.task.add(batch(0))
    await settled(p.task)
    assert isinstance(p.membership.failure, RuntimeError) and TP in p.consumer.paused


async def test_a_stop_abandons_a_commit_stuck_past_its_time_and_that_is_no_failure():
    commits = Commits()  # a broker that never answers
    p = await serving(commits)
    tasks = PartitionTasks(p.context)
    tasks._tasks[0] = p.task
    p.task.add(batch(0))
    assert await tasks.drain(0.05) == 1
    await until(lambda: not tasks.committing(), 5, "the abandoned commit ended")
    assert not tasks.committing() and p.membership.failure is None and TP in p.consumer.paused


async def test_transactions_of_batches_published_ahead_begin_a_commit_interval_apart():
    commits = Commits()
    p = await serving(commits, commit_interval_s=0.5)
    commits.gate.set()
    loop = asyncio.get_running_loop()
    began = loop.time()
    p.task.add(batch(0, ahead=True))  # the first commits at once
    await until(lambda: commits.transactions, 5, "batch 0's transaction began")
    for offset in (1, 2, 3):  # applied meanwhile: they wait out the interval, then go together
        p.task.add(batch(offset, ahead=True))
    assert commits.transactions == [[0]]
    await settled(p.task)
    assert commits.transactions == [[0], [1, 2, 3]] and commits.observed == [0, 1, 2, 3]
    assert loop.time() - began >= 0.5


async def test_a_batch_whose_verdicts_wait_for_its_transaction_is_committed_at_once():
    commits = Commits()
    p = await serving(commits, commit_interval_s=60.0)
    commits.gate.set()
    p.task.add(batch(0, ahead=True))
    await until(lambda: commits.transactions, 5, "batch 0's transaction began")
    p.task.add(batch(1))  # its commands are in the transaction
    await asyncio.wait_for(settled(p.task), 5)
    assert commits.transactions == [[0], [1]]


async def test_an_assignment_waits_out_a_broker_that_does_not_answer_and_serves(monkeypatch):
    # A broker lost during a rebalance: the new partition's producer and its changelog read time
    # out once each, then answer. The worker the group hands the partition to must not exit.
    monkeypatch.setattr(retry, "RETRY_FIRST_S", 0.01)
    p = FakePartition()
    start_producer, restore = p.context.start_producer, p.context.restore
    failures = {"producer": 1, "restore": 1}

    async def flaky_producer(partition: int) -> object:
        if failures["producer"]:
            failures["producer"] -= 1
            raise KafkaTimeoutError("InitProducerId")
        return await start_producer(partition)

    async def flaky_restore(partitions: list[int], tick: object) -> dict[int, PartitionStates]:
        if failures["restore"]:
            failures["restore"] -= 1
            raise KafkaTimeoutError("Failed to get offsets by times in 5000 ms")
        return await restore(partitions, tick)  # type: ignore[arg-type]

    p.context.start_producer, p.context.restore = flaky_producer, flaky_restore  # type: ignore[assignment]
    tasks = PartitionTasks(p.context)
    assert await tasks.assign([SOURCE]) == [0]
    task = tasks.get(0)
    assert task is not None and task.state is TaskState.RUNNING and task.producer is p.committed
    assert failures == {"producer": 0, "restore": 0} and p.started == p.restores == 1
