"""The fault matrix on a real broker: kills under load, a worker cut off from the broker and back,
a zombie fenced off, a hung worker."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer

from stallwatch.worker.health import STALLED_EXIT_CODE
from tests.kafka_harness import (
    END_TXN,
    CuttableLink,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    kafka,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.worker.faults import cut_off, three_kills
from tests.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka


async def test_three_kills_under_steady_load_one_during_a_rebalance_change_no_decision():
    outcome = await three_kills()
    assert len(outcome.kills) == 3
    assert outcome.exact, outcome.summary()


async def test_a_worker_cut_off_until_its_partitions_moved_is_fenced_on_return_and_changes_no_decision():
    # The cut holds A's commit while its session expires and B takes every partition over, which
    # fences A's producers and aborts A's open transactions. On the heal, the old commit reaches
    # the broker and is refused (ProducerFenced): A exits 1, as any fenced worker does (to be
    # restarted as a new member), and nothing it did during or after the cut is published.
    outcome = await cut_off(heal_before_expiry=False)
    assert outcome.taken_over, outcome.zombie_log
    assert outcome.exact, outcome.summary()
    assert outcome.zombie_exit == 1 and outcome.zombie_fenced, outcome.zombie_log


async def test_a_worker_cut_off_mid_transaction_and_back_before_its_session_expired_carries_on():
    # The cut holds one of A's transactional writes, and ends before the group would remove A:
    # the group never rebalances, A's transaction completes late, and A keeps serving.
    outcome = await cut_off(heal_before_expiry=True)
    assert not outcome.taken_over, outcome.zombie_log
    assert outcome.exact, outcome.summary()
    assert outcome.zombie_exit is None and not outcome.zombie_fenced, outcome.zombie_log


async def test_the_broker_restarted_under_load_changes_no_decision():
    settings = fresh_settings(partitions=4)
    worker = WorkerProcess(settings)
    try:
        await wait_until_serving(settings)
        log = interleave(mixed_fleet(120))
        producing = asyncio.create_task(produce(settings, log, pause_every=80, pause_s=0.1))
        await asyncio.sleep(2)
        await asyncio.to_thread(kafka, "down")
        await asyncio.to_thread(kafka, "up")
        await producing
        expected = by_run(replay_commands(log))
        got = await collect(settings, settings.commands_topic, sum(map(len, expected.values())) + 1, 120)
        assert {run: by_run(got).get(run) for run in expected} == expected
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()


async def test_a_worker_fenced_by_a_successor_exits_non_zero_and_loses_nothing():
    settings = fresh_settings(partitions=1)
    worker = WorkerProcess(settings, "zombie")
    successor = None
    try:
        await wait_until_serving(settings)
        # What a worker taking partition 0 over does first: a producer under its transactional id.
        fencer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap,
                                  transactional_id=f"{settings.group_id}-{settings.events_topic}-0")
        await fencer.start()
        await fencer.stop()
        log = interleave(mixed_fleet(3))
        await produce(settings, log)
        code = await asyncio.to_thread(worker.proc.wait, 30)
        assert code == 1, worker.log_tail()
        assert "the pipeline failed" in worker.log_path.read_text()
        successor = WorkerProcess(settings, "successor")
        expected = by_run(replay_commands(log))
        got = await collect(settings, settings.commands_topic, sum(map(len, expected.values())) + 1, 60)
        assert {run: by_run(got).get(run) for run in expected} == expected
    finally:
        worker.stop()
        if successor is not None:
            successor.stop()


async def test_a_hung_worker_reports_itself_dead_then_exits():
    settings = fresh_settings(partitions=2)
    async with CuttableLink() as link:
        worker = WorkerProcess(settings, "hung", env={"STALLWATCH_STALL_TIMEOUT_S": "3",
                                                      "STALLWATCH_BOOTSTRAP": link.bootstrap})
        try:
            await wait_until_serving(settings)
            assert worker.health("/health/live") == 200
            producing = asyncio.create_task(produce(settings, interleave(mixed_fleet(60)),
                                                    pause_every=20, pause_s=0.02))
            # A commit held from the broker: the batch waits on an answer that never comes. (A
            # frozen broker hung a batch only when one happened to be in flight at the freeze.)
            link.cut_at(END_TXN)
            await asyncio.wait_for(link.cut_seen.wait(), 15)
            statuses = []
            deadline = time.monotonic() + 15
            while worker.alive() and time.monotonic() < deadline:
                statuses.append(await asyncio.to_thread(worker.health, "/health/live"))
                await asyncio.sleep(0.5)
            assert 503 in statuses, statuses
            code = await asyncio.to_thread(worker.proc.wait, 10)
            assert code == STALLED_EXIT_CODE, worker.log_tail()
            producing.cancel()
        finally:
            await asyncio.to_thread(worker.stop)
