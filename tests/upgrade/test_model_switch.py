"""A switch of the workers' transaction model under load, and back, as CHANGELOG.md says to make
it: every worker of the old model stopped (SIGTERM), then the new model's started. The two
models keep the same changelog (run states and each partition's position), so the new workers
read on from where the old ones committed, and every run's commands equal replay's."""

from __future__ import annotations

import asyncio

import pytest

from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.worker.faults import MODELS, Outcome, _compare
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka

# 400 events a second: each slice of the log is still arriving while the workers are switched.
EVERY, PAUSE_S = 40, 0.1


async def test_the_workers_switched_to_the_group_model_and_back_under_load_change_no_decision():
    settings = fresh_settings(partitions=4)
    log = interleave(mixed_fleet(160))
    expected = by_run(replay_commands(log))
    slices = [log[i * len(log) // 4 : (i + 1) * len(log) // 4] for i in range(4)]
    workers: list[WorkerProcess] = []

    def start(model: str, name: str) -> WorkerProcess:
        worker = WorkerProcess(settings, name, env=MODELS[model])
        workers.append(worker)
        return worker

    try:
        serving = [start("partition", "a-partition"), start("partition", "b-partition")]
        await wait_until_serving(settings, timeout_s=120)
        await produce(settings, slices[0], pause_every=EVERY, pause_s=PAUSE_S)
        for number, model in enumerate(("group", "partition"), start=1):
            load = produce(settings, slices[number], pause_every=EVERY, pause_s=PAUSE_S)
            producing = asyncio.create_task(load)
            for worker in serving:
                assert worker.alive(), f"{worker.log_path} exited on its own:\n{worker.log_tail()}"
                worker.stop()
                assert worker.proc.returncode == 0, f"{worker.log_path}:\n{worker.log_tail()}"
            serving = [start(model, f"a-{model}-{number}"), start(model, f"b-{model}-{number}")]
            for worker in serving:
                await worker.ready(timeout_s=120)
            await producing
        await produce(settings, slices[3], pause_every=EVERY, pause_s=PAUSE_S)
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 180, settle_s=SETTLE_S
        )
        assert all(worker.alive() for worker in serving), [worker.log_tail() for worker in serving]
    finally:
        for worker in workers:
            worker.stop()
    outcome = Outcome(runs=len(expected))
    _compare(outcome, expected, got)
    assert outcome.exact, outcome.summary()
    for worker in workers:
        assert "Traceback" not in worker.log_path.read_text(errors="replace"), worker.log_tail()
