"""The fault matrix on a real broker: kills under load, a worker cut off from the broker and back,
a zombie fenced off, a hung worker."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka import AIOKafkaProducer

from stallwatch.kafka.topics import ensure_topics
from stallwatch_streams.worker.health import STALLED_EXIT_CODE
from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    frozen_broker,
    kafka,
    produce,
    replay_commands,
    serving_worker,
    stored_events,
    wait_until_serving,
)
from tests.script import RunScript
from tests.streams.worker.faults import MODELS, STEADY_PAUSE_S, cut_off, three_kills
from tests.streams.worker.fleet_logs import interleave, mixed_fleet
from tests.waiting import until

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("model", MODELS)
async def test_three_kills_under_steady_load_one_during_a_rebalance_change_no_decision(model: str):
    # Under the group model (cooperative-sticky) the survivor keeps its partitions while the
    # restarted worker takes the dead one's, and a takeover waits out the dead worker's open
    # transaction (docs/exactly-once.md): b is killed once a2 is assigned, and a slower load
    # keeps going past the third kill.
    group = model == "group"
    outcome = await three_kills(
        env=MODELS[model],
        pause_s=0.4 if group else STEADY_PAUSE_S,
        rebalance_s=60.0 if group else 30.0,
        survivor_revokes=not group,
    )
    assert len(outcome.kills) == 3
    assert outcome.exact, outcome.summary()
    assert outcome.skipped == 0


async def test_three_kills_with_the_group_offsets_an_hour_behind_resume_at_the_changelog_position():
    # The group's offsets are committed once per partition and then never again: every restart
    # and takeover must resume at the position its changelog holds, or it reads events again.
    outcome = await three_kills(env={"STALLWATCH_GROUP_OFFSETS_INTERVAL_S": "3600"})
    assert outcome.exact, outcome.summary()
    assert outcome.skipped == 0


@pytest.mark.xdist_group("cuttable-link")
@pytest.mark.parametrize("model", MODELS)
async def test_a_worker_cut_off_until_its_partitions_moved_is_fenced_on_return_and_changes_no_decision(
    model: str,
):
    # The cut holds A's commit while its session expires and B takes every partition over, which
    # fences A's producers and aborts A's open transactions. On the heal, the old commit reaches
    # the broker and is refused (ProducerFenced): A's task goes back to the group, A rejoins as a
    # new member and serves its share again, and nothing it did during the cut is published.
    # Under the group model the successor waits out A's open transaction, which the broker
    # aborts for its age; A's late commit is refused, by its producer's epoch or its generation.
    outcome = await cut_off(
        heal_before_expiry=False, model=model, pause_s=STEADY_PAUSE_S if model == "partition" else 0.3
    )
    assert outcome.taken_over, outcome.zombie_log
    assert outcome.exact, outcome.summary()
    assert outcome.zombie_exit is None and outcome.zombie_fenced, outcome.zombie_log
    assert outcome.zombie_rejoined, outcome.zombie_log


@pytest.mark.xdist_group("cuttable-link")
async def test_a_worker_cut_off_mid_transaction_and_back_before_its_session_expired_carries_on():
    # The cut holds one of A's transactional writes, and ends before the group would remove A:
    # the group never rebalances, A's transaction completes late, and A keeps serving.
    outcome = await cut_off(heal_before_expiry=True)
    assert not outcome.taken_over, outcome.zombie_log
    assert outcome.exact, outcome.summary()
    assert outcome.zombie_exit is None and not outcome.zombie_fenced, outcome.zombie_log


def diff_of(run: str, expected: dict[str, list[bytes]], got: dict[str, list[bytes]]) -> str:
    """One differing run's commands, replay's beside the worker's, for the failure message."""
    return f"{run}:\n replay: {expected.get(run)}\n worker: {got.get(run)}"


@pytest.mark.solo
@pytest.mark.parametrize("model", MODELS)
async def test_the_broker_restarted_under_load_changes_no_decision(model: str):
    settings = fresh_settings(partitions=4)
    worker = WorkerProcess(settings, env=MODELS[model])
    try:
        await wait_until_serving(settings)
        log = interleave(mixed_fleet(120))
        producing = asyncio.create_task(produce(settings, log, pause_every=80, pause_s=0.1))
        # Under load: a batch of the log committed (beside the probe's) before the broker goes.
        await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= 2)
        await asyncio.to_thread(kafka, "down")
        await asyncio.to_thread(kafka, "up")
        await producing
        # The reference is the log the broker kept: the test's own producer retries through the
        # restart, so what it meant to send may reach the topic twice or not at all.
        stored = await stored_events(settings)
        expected = by_run(replay_commands(stored))
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 120, settle_s=SETTLE_S
        )
        got_by_run = by_run(got)
        differing = sorted(run for run in expected if got_by_run.get(run) != expected[run])
        if differing:
            # pytest.fail, not an assert: pytest cuts a long assertion message short.
            pytest.fail(
                f"{len(differing)} runs differ from replay: {differing}\n"
                f"{diff_of(differing[0], expected, got_by_run)}\n"
                f"stored events {len(stored)}, sent {len(log)}, commands expected "
                f"{sum(map(len, expected.values()))}, received {len(got)}\n"
                f"{worker.log_tail()}"
            )
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()


async def test_a_worker_fenced_by_a_producer_outside_its_group_serves_on_and_loses_nothing():
    settings = fresh_settings(partitions=1)
    worker = WorkerProcess(settings, "fenced")
    try:
        await wait_until_serving(settings)
        # A producer under partition 0's transactional id, as a successor's would be, though the
        # group gave the partition to no one else: the worker's next commit is fenced.
        fencer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap,
            transactional_id=f"{settings.group_id}-{settings.events_topic}-0",
        )
        await fencer.start()
        await fencer.stop()
        log = interleave(mixed_fleet(3))
        await produce(settings, log)
        expected = by_run(replay_commands(log))
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 60, settle_s=SETTLE_S
        )
        assert {run: by_run(got).get(run) for run in expected} == expected

        # The fenced task asks the group, which gives partition 0 back in the rebalance that
        # follows, and the worker rebuilds it (the commands above were published ahead, before
        # the fenced commit).
        def rebuilt() -> bool:
            assert worker.alive(), worker.log_tail()
            return "(restored [0])" in worker.log_path.read_text().partition("its producer was fenced")[2]

        await until(rebuilt, 30, lambda: f"partition 0 restored after the fencing:\n{worker.log_tail()}", 0.2)
        # And serves on: a second fleet's commands, from the rebuilt partition.
        more = interleave(mixed_fleet(6)[3:])  # runs of their own
        await produce(settings, more)
        expected = by_run(replay_commands(log + more))
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 60, settle_s=SETTLE_S
        )
        assert {run: by_run(got).get(run) for run in expected} == expected
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()


@pytest.mark.solo
async def test_a_hung_worker_reports_itself_dead_then_exits():
    settings = fresh_settings(partitions=2)
    # A backlog keeps both partitions in one transaction after another, so that freezing the
    # broker leaves a transaction waiting on a broker that never answers. A freeze that lands
    # between two transactions finds the worker idle, not hung (its loop goes round, it stays
    # live): then the broker is thawed and frozen again, while the backlog lasts.
    await ensure_topics(settings)
    await produce(settings, interleave(mixed_fleet(1000)))
    worker = WorkerProcess(settings, "hung", env={"STALLWATCH_STALL_TIMEOUT_S": "2"})
    try:
        await collect(settings, settings.commands_topic, 50, 60)
        assert worker.health("/health/live") == 200
        statuses: list[int] = []

        async def stalled() -> bool:
            statuses.append(await asyncio.to_thread(worker.health, "/health/live"))
            return 503 in statuses or not worker.alive()

        for _ in range(5):
            with frozen_broker():  # 3 s to see a stall; once seen, up to 15 s to see the exit
                with contextlib.suppress(AssertionError):  # idle, not hung: thawed and frozen again
                    await until(stalled, 3, "the worker reporting itself stalled", interval_s=0.25)
                if 503 in statuses:  # the exit it says comes next (or after the thaw, below)
                    with contextlib.suppress(AssertionError):
                        await until(lambda: not worker.alive(), 15, "the worker's exit", interval_s=0.25)
            if 503 in statuses or not worker.alive():
                break
            await asyncio.sleep(0.1)  # the thing under test: a thawed moment, then a freeze anew
        assert 503 in statuses, statuses
        assert worker.proc.wait(10) == STALLED_EXIT_CODE, worker.log_tail()
    finally:
        worker.stop()


async def test_an_event_redelivered_after_run_ended_has_no_further_effect():
    run = RunScript("ended")
    run.start_round()
    run.call("search", {"q": 1})
    run.end_round()
    run.end()
    redelivered = run.lines()[2]  # the call_proposed, sent again by a retrying runtime
    async with serving_worker(partitions=1) as (settings, _):
        await produce(settings, [*run.lines(), redelivered])
        expected = by_run(replay_commands([*run.lines(), redelivered]))
        got = await collect(settings, settings.commands_topic, 3, 5)  # room for a second verdict
    assert by_run(got)["ended"] == expected["ended"]
    assert len(expected["ended"]) == 1  # one verdict for the call, none for its redelivery
