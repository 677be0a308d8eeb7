"""The poison guard's record as a live owner leaves it (no broker): a record is idle once what it
names is applied, an owner that loses its partition alive (fenced, or its transaction failed)
leaves no busy record before anyone else can take the partition, a task's writes land in the
order it made them, and a takeover of this process's own record finds no death. So no successor
takes a batch or an event that killed nothing for the cause of a death."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import replace

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from stallwatch.settings import Settings
from stallwatch_streams.worker import retry
from stallwatch_streams.worker import task as task_module
from stallwatch_streams.worker.attempts import AHEAD_RECORDS, Attempt, key_of, takeover
from stallwatch_streams.worker.pipeline import Pipeline
from stallwatch_streams.worker.task_state import TaskState
from tests.streams.worker.fake_kafka import FakeProducer, consumer_records
from tests.streams.worker.fake_tasks import FakePipeline
from tests.streams.worker.test_commit import looping_run
from tests.waiting import until

SETTINGS = Settings(topic_prefix="t")
TP = TopicPartition(SETTINGS.events_topic, 0)
KEY = key_of(TP.topic, TP.partition)
VALUES = [m.value for m in looping_run()]
RECORDS = len(VALUES)


@pytest.fixture(autouse=True)
def retried_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused write is tried again without the backoff's wait."""
    monkeypatch.setattr(retry, "RETRY_FIRST_S", 0.0)


class AttemptsStandIn:
    """The attempts topic as the last record of each key. Every write lets the event loop run
    before it lands (as a broker's acknowledgement does) and is noted with how many times the
    pipeline had asked its group to rebalance by then. `held`: writes naming that batch wait for
    the event before they land; `refused_idle`: idle records after a busy one are refused while
    the task serves (the broker answers again as it loses its partition)."""

    def __init__(
        self, previous: Attempt | None, refused_idle: bool = False, posts: bool = False, ahead: bool = False
    ) -> None:
        self.owner = "this"
        self.posts = posts  # idle records taken at once, as librdkafka's producer takes them
        self.posted = 0
        self.ahead = ahead  # records naming offsets ahead taken at once, acknowledged later
        self.records = {} if previous is None else {KEY: previous}
        self.written: list[tuple[Attempt, int]] = []
        self.pipeline: Pipeline | None = None
        self.refused_idle = refused_idle
        self.refusals = 0
        self.held: tuple[tuple[int, int], asyncio.Event] | None = None
        self.acks_held: asyncio.Event | None = None  # records posted ahead acknowledged once set

    async def read(self, keys: Collection[str]) -> dict[str, Attempt]:
        return {key: self.records[key] for key in keys if key in self.records}

    async def write(self, key: str, attempt: Attempt) -> None:
        assert self.pipeline is not None
        await asyncio.sleep(0)
        if self.held is not None and attempt.batch == self.held[0]:
            await self.held[1].wait()
        task = self.pipeline.tasks.get(0)
        serving = task is not None and not task.held
        if not attempt.busy and self.records.get(key, Attempt()).busy and self.refused_idle and serving:
            self.refusals += 1
            raise KafkaConnectionError("the broker went away")
        stamped = replace(attempt, owner=self.owner)
        self.records[key] = stamped
        self.written.append((stamped, self.pipeline.membership.rejoins))

    def post(self, key: str, attempt: Attempt) -> bool:
        if not self.posts:
            return False
        self._landed_at_once(key, attempt)
        return True

    def post_ahead(self, key: str, attempt: Attempt) -> asyncio.Future[None] | None:
        if not self.ahead:
            return None
        self._landed_at_once(key, attempt)
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.acks_held is None:
            asyncio.get_running_loop().call_soon(acked.set_result, None)  # as a broker's acknowledgement
        else:
            gate = self.acks_held
            asyncio.get_running_loop().create_task(gate.wait()).add_done_callback(
                lambda _: acked.set_result(None)
            )
        return acked

    def _landed_at_once(self, key: str, attempt: Attempt) -> None:
        assert self.pipeline is not None
        self.posted += 1
        stamped = replace(attempt, owner=self.owner)
        self.records[key] = stamped
        self.written.append((stamped, self.pipeline.membership.rejoins))

    @property
    def last(self) -> Attempt:
        return self.records[KEY]

    @property
    def records_written(self) -> list[Attempt]:
        return [attempt for attempt, _ in self.written]


async def serving(
    previous: Attempt | None,
    *producers: FakeProducer,
    fetches: tuple[int, ...] = (RECORDS,),
    refused_idle: int = 0,
    posts: bool = False,
    ahead: bool = False,
) -> tuple[Pipeline, AttemptsStandIn]:
    """A pipeline that takes partition 0 over after `previous` (the record its last owner left)
    and reads the looping run in fetches of the sizes given (0: a fetch that finds nothing), its
    producers started in the order given (then new ones)."""
    attempts = AttemptsStandIn(previous, refused_idle, posts, ahead)
    fakes = FakePipeline(SETTINGS, *producers, attempts=attempts)
    consumer, pipeline = fakes.consumer, fakes.pipeline
    attempts.pipeline = pipeline
    await fakes.assigned()
    first = 0
    for size in fetches:
        values = VALUES[first : first + size]
        consumer.queued.append({TP: consumer_records(TP.topic, 0, b"r1", values, first)} if size else {})
        first += size
    return pipeline, attempts


def state(pipeline: Pipeline) -> TaskState | None:
    task = pipeline.tasks.get(0)
    return None if task is None else task.state


async def stopped(loop: asyncio.Task[None]) -> None:
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop


DIED_IN_A_BATCH = replace(Attempt().over(0, 100), owner="the dead one")


async def test_a_careful_owner_leaves_its_record_idle_once_its_events_are_applied():
    pipeline, attempts = await serving(DIED_IN_A_BATCH)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 1 + RECORDS + 1, 5, lambda: attempts.written)
    assert [a.applying for a in attempts.records_written[1:-1]] == list(range(RECORDS))  # one by one
    assert not attempts.last.busy and attempts.last.careful_through == 100
    # A kill now, while its transaction waits: its successor is careful, and finds no poison.
    assert takeover(attempts.last, -1, owner="a successor") == Attempt(careful_through=100)
    await stopped(loop)


async def test_a_careful_stretch_over_two_fetches_names_each_event_while_it_is_applied():
    pipeline, attempts = await serving(DIED_IN_A_BATCH, fetches=(5, RECORDS - 5))
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 1 + RECORDS + 2, 5, lambda: attempts.written)
    said = [a.applying if a.busy else "idle" for a in attempts.records_written[1:]]
    assert said == [0, 1, 2, 3, 4, "idle", *range(5, RECORDS), "idle"]
    await stopped(loop)


async def test_an_owner_leaves_its_record_idle_once_its_batch_is_applied_while_its_transaction_waits():
    gate = asyncio.Event()
    pipeline, attempts = await serving(None, FakeProducer(gate=gate))
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 3, 5, lambda: attempts.written)
    assert [a.batch for a in attempts.records_written] == [None, (0, RECORDS - 1), None]
    assert pipeline.tasks.committing()  # its transaction still waits
    # A kill now: the batch killed nothing, and its successor applies it as any batch.
    assert takeover(attempts.last, -1, owner="a successor") == Attempt()
    gate.set()
    await stopped(loop)


async def test_an_idle_record_is_posted_with_no_wait_where_the_log_takes_it_at_once():
    gate = asyncio.Event()
    pipeline, attempts = await serving(None, FakeProducer(gate=gate), posts=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 3, 5, lambda: attempts.written)
    assert [a.batch for a in attempts.records_written] == [None, (0, RECORDS - 1), None]
    assert attempts.posted == 1  # the idle record; the batch's record was written and awaited
    assert takeover(attempts.last, -1, owner="a successor") == Attempt()
    gate.set()
    await stopped(loop)


async def test_an_applied_batch_record_names_the_offsets_ahead_and_the_next_batch_waits_for_no_write():
    gate = asyncio.Event()
    pipeline, attempts = await serving(None, FakeProducer(gate=gate), fetches=(3, 0, 2, 0, 1), ahead=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: pipeline.tasks.get(0).next_offset == 6, 5, lambda: attempts.written)
    # Written and awaited for the first batch; posted ahead of it once applied, which named the
    # next two batches: nothing more written for them.
    assert [a.batch for a in attempts.records_written] == [None, (0, 2), (3, 3 + AHEAD_RECORDS - 1)]
    assert attempts.posted == 1
    # A death now: its successor is careful through the offsets named ahead, and finds no poison.
    assert takeover(attempts.last, 3, owner="a successor") == Attempt(careful_through=3 + AHEAD_RECORDS - 1)
    gate.set()
    await stopped(loop)


async def test_a_record_posted_ahead_spares_a_batch_its_mark_only_once_acknowledged_and_naming_it():
    pipeline, attempts = await serving(None, fetches=(1,), ahead=True)
    attempts.acks_held = gate = asyncio.Event()
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: attempts.posted == 1, 5, lambda: attempts.written)
    task = pipeline.tasks.get(0)
    assert attempts.last.batch == (1, AHEAD_RECORDS)
    assert not task.landed_ahead(1, 1)  # posted, not acknowledged: the mark waits for it
    gate.set()
    await until(lambda: task.landed_ahead(1, 1), 5, lambda: attempts.written)
    assert task.landed_ahead(1, AHEAD_RECORDS)
    assert not task.landed_ahead(1, AHEAD_RECORDS + 1)  # past what it names: written first
    await stopped(loop)


async def test_a_record_posted_ahead_is_posted_again_once_fewer_than_half_its_offsets_are_left():
    half = AHEAD_RECORDS // 2
    fetches = (1, 0, half, 0, 1, 0)
    pipeline, attempts = await serving(None, fetches=fetches, ahead=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 4, 5, lambda: attempts.written)
    assert [a.batch for a in attempts.records_written] == [
        None,
        (0, 0),
        (1, AHEAD_RECORDS),
        (half + 2, half + 1 + AHEAD_RECORDS),
    ]
    await stopped(loop)


async def test_batches_fetched_one_after_another_are_named_by_the_record_posted_ahead():
    pipeline, attempts = await serving(None, fetches=(1, 2, 3), ahead=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: pipeline.tasks.get(0).next_offset == 6, 5, lambda: attempts.written)
    assert [a.batch for a in attempts.records_written] == [None, (0, 0), (1, AHEAD_RECORDS)]
    await stopped(loop)


async def test_a_task_whose_commits_are_held_back_makes_its_record_idle_past_the_bound(monkeypatch):
    monkeypatch.setattr(task_module, "AHEAD_UNCOMMITTED_MAX", 2)
    gate = asyncio.Event()
    gate.set()
    pipeline, attempts = await serving(None, FakeProducer(gate=gate), fetches=(1,), ahead=True)
    loop = asyncio.create_task(pipeline.run())
    task = pipeline.tasks.get(0)
    await until(lambda: task.position(-1) == 1, 5, lambda: attempts.written)
    gate.clear()  # its commits held back from here, as a frozen broker holds them
    pipeline.consumer.queued.append({TP: consumer_records(TP.topic, 0, b"r1", VALUES[1:5], 1)})
    await until(lambda: task.next_offset == 5 and not attempts.last.busy, 5, lambda: attempts.written)
    # Four events wait for their commit, past the bound of two: the record is idle, not ahead.
    assert [a.batch for a in attempts.records_written] == [None, (0, 0), (1, AHEAD_RECORDS), None]
    gate.set()
    await stopped(loop)


async def test_a_careful_owner_makes_its_records_idle_where_it_could_post_them_ahead():
    pipeline, attempts = await serving(DIED_IN_A_BATCH, ahead=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 1 + RECORDS + 1, 5, lambda: attempts.written)
    assert [a.applying for a in attempts.records_written[1:-1]] == list(range(RECORDS))
    assert not attempts.last.busy
    await stopped(loop)


async def test_a_fetch_already_arrived_names_its_batch_in_place_of_the_idle_record():
    """Records already there once a batch is applied: the next batch's record replaces the
    applied one's, one round of writes a fetch; the idle record follows once nothing more came."""
    pipeline, attempts = await serving(None, fetches=(5, RECORDS - 5))
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 4, 5, lambda: attempts.written)
    await stopped(loop)
    assert [a.batch for a in attempts.records_written] == [None, (0, 4), (5, RECORDS - 1), None]


async def test_a_takeover_of_this_process_record_finds_no_death():
    """The partition fenced and given back to the process that held it: not careful."""
    pipeline, attempts = await serving(replace(Attempt().over(0, 100), owner="this"))
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: len(attempts.written) == 3, 5, lambda: attempts.written)
    assert [a.batch for a in attempts.records_written] == [None, (0, RECORDS - 1), None]
    await stopped(loop)


@pytest.mark.parametrize(
    "failure", [ProducerFenced(), KafkaConnectionError("the broker went away")], ids=["fenced", "failed"]
)
async def test_a_record_left_busy_is_made_idle_before_the_partition_can_move(failure):
    """The idle write after the apply was refused: the task that loses its partition alive
    (fenced, or rebuilt after its transaction failed) writes it again, and waits for it."""
    gate = asyncio.Event()
    failing = FakeProducer(fail_commit=failure, gate=gate)
    pipeline, attempts = await serving(None, failing, refused_idle=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: attempts.refusals, 5, "the idle write refused")
    gate.set()
    await until(lambda: failing.stopped and not attempts.last.busy, 5, lambda: attempts.written)
    batch, idle = attempts.written[-2:]
    assert batch[0].batch == (0, RECORDS - 1) and idle == (batch[0].idle, 0)  # group not asked yet
    await stopped(loop)


async def test_a_posted_idle_record_is_written_again_and_awaited_before_the_partition_can_move():
    """Its acknowledgement was never awaited: the fenced task writes it again through the same
    log, and waits for that write, before the group is asked."""
    gate = asyncio.Event()
    fenced = FakeProducer(fail_commit=ProducerFenced(), gate=gate)
    pipeline, attempts = await serving(None, fenced, posts=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: attempts.posted == 1, 5, lambda: attempts.written)
    gate.set()
    await until(lambda: pipeline.membership.rejoins == 1, 5, "the group asked")
    said = [(a.batch, asked) for a, asked in attempts.written]
    assert said == [(None, 0), ((0, RECORDS - 1), 0), (None, 0), (None, 0)]  # posted, then awaited
    await stopped(loop)


async def test_a_write_under_way_when_the_partition_is_lost_lands_before_its_release():
    """The second batch's record is held by the broker while the first batch's transaction is
    fenced: the release waits for it, and the record ends idle, before the group is asked."""
    gate, landing = asyncio.Event(), asyncio.Event()
    fenced = FakeProducer(fail_commit=ProducerFenced(), gate=gate)
    pipeline, attempts = await serving(None, fenced, fetches=(5, RECORDS - 5))
    attempts.held = ((5, RECORDS - 1), landing)
    loop = asyncio.create_task(pipeline.run())
    # The takeover's record and the first batch's landed; the second batch's, in place of the
    # first's idle one, is held.
    await until(
        lambda: pipeline.tasks.committing() and len(attempts.written) == 2, 5, lambda: attempts.written
    )
    gate.set()  # the first batch's transaction is fenced while the second's record waits
    await until(lambda: state(pipeline) is TaskState.REBUILDING, 5, "the fenced task discarded")
    assert pipeline.membership.rejoins == 0  # the release waits for the write under way
    landing.set()
    await until(lambda: pipeline.membership.rejoins == 1, 5, "the group asked")
    assert [(a.batch, asked) for a, asked in attempts.written[-2:]] == [((5, RECORDS - 1), 0), (None, 0)]
    assert state(pipeline) is TaskState.DROPPED
    await stopped(loop)


async def test_a_held_task_writes_no_record_and_a_write_under_way_is_given_up():
    pipeline, attempts = await serving(None)
    task = pipeline.tasks.get(0)
    assert task is not None
    refusals = [KafkaConnectionError("the broker went away")]

    async def write(key: str, attempt: Attempt) -> None:
        if refusals:
            task.lifecycle.to(TaskState.REBUILDING)  # dropped while the write waited
            raise refusals.pop()
        raise AssertionError("written after the task was held")

    attempts.write = write  # type: ignore[method-assign]
    assert not await task.record(Attempt().over(0, 5))
    assert not await task.record(Attempt().over(0, 5))  # held: not tried at all
    assert task.attempt == Attempt()  # what its takeover wrote


async def test_a_release_the_broker_keeps_refusing_ends_when_the_worker_stops():
    """The idle write of a fenced task's release is refused again and again: once the worker
    stops, the release gives up at once (its attempts log stops with the worker) instead of
    trying on for RELEASE_WAIT_S and then in the background."""
    gate = asyncio.Event()
    fenced = FakeProducer(fail_commit=ProducerFenced(), gate=gate)
    pipeline, attempts = await serving(None, fenced, refused_idle=True)
    loop = asyncio.create_task(pipeline.run())
    await until(lambda: attempts.refusals, 5, "the idle write after the apply refused")
    tries: list[Attempt] = []

    async def refused(key: str, attempt: Attempt) -> None:
        tries.append(attempt)
        await asyncio.sleep(0)
        raise KafkaConnectionError("the broker went away")

    attempts.write = refused  # type: ignore[method-assign]
    gate.set()  # fenced: the task releases its busy record, and the broker refuses it
    await until(lambda: len(tries) >= 3, 5, "the release tried again")
    assert state(pipeline) is TaskState.REBUILDING and not tries[-1].busy
    pipeline.membership.stopping = True
    await until(lambda: state(pipeline) is TaskState.DROPPED, 5, "the release given up")
    given_up_after = len(tries)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(tries) == given_up_after  # no write tried after it gave up
    await stopped(loop)
