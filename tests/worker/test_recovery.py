"""Crashes on a real broker: a worker killed with SIGKILL mid-stream, a broker restarted.

The commands of every run must equal a crash-free replay of the same events; a command may
arrive twice only as the same command (same id, same bytes).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.kafka_harness import (
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    kafka,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka


async def test_a_worker_killed_mid_stream_is_replaced_and_no_command_is_lost_or_changed():
    settings = fresh_settings(partitions=4)
    first = WorkerProcess(settings, "first")
    second = None
    try:
        await wait_until_serving(settings)
        second = WorkerProcess(settings, "second")
        await second.ready()  # the group has rebalanced the partitions over both workers
        log = interleave(mixed_fleet(240))
        expected = replay_commands(log)
        producing = asyncio.create_task(produce(settings, log, pause_every=400, pause_s=0.1))
        await asyncio.sleep(1.5)
        assert not producing.done(), "the log was produced before the kill: make it longer"
        second.kill()
        await producing
        got = await collect(settings, settings.commands_topic, len(expected) + 1, 120)
        runs = by_run(got)
        missing = [run for run in by_run(expected) if runs.get(run) != by_run(expected)[run]]
        assert not missing, f"{len(missing)} runs differ from replay, e.g. {missing[:3]}"
        assert first.alive()
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def test_a_broker_restart_while_a_worker_runs():
    settings = fresh_settings(partitions=2)
    worker = WorkerProcess(settings)
    try:
        await wait_until_serving(settings)
        log = interleave(mixed_fleet(60))
        half = len(log) // 2
        await produce(settings, log[:half])
        kafka("down")
        kafka("up")
        await produce(settings, log[half:])
        expected = replay_commands(log)
        got = await collect(settings, settings.commands_topic, len(expected) + 1, 120)
        runs = by_run(got)
        assert {run: runs.get(run) for run in by_run(expected)} == by_run(expected)
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
