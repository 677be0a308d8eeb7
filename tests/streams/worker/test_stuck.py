"""A worker whose broker stops answering mid-transaction, on the real broker: SIGTERM still ends
it within its stop deadline, and a transaction the broker timed out (no successor anywhere) is
rebuilt, not taken for a fencing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from stallwatch.kafka.topics import ensure_topics
from stallwatch_streams.worker.service import ABANDONED_EXIT_CODE, STOP_TIMEOUT_S
from tests.kafka_harness import (
    END_TXN,
    CuttableLink,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    frozen_broker,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka

# Room for the process to be reaped and the test to see it on a loaded machine.
EXIT_MARGIN_S = 3.0
# Past the worker's transaction timeout (15 s): the broker aborts the open transaction on its own.
FREEZE_S = 22.0
# A held commit outlives the transaction timeout (15 s) and the broker's sweep for timed-out
# transactions (every 10 s).
HOLD_S = 27.0


def errors_in(worker: WorkerProcess) -> list[str]:
    """The worker's log lines at ERROR or above."""
    lines = []
    for line in worker.log_path.read_text(errors="replace").splitlines():
        try:
            level = json.loads(line).get("level")
        except ValueError:
            level = "ERROR" if "Traceback" in line or "Error" in line else None
        if level in ("ERROR", "CRITICAL"):
            lines.append(line)
    return lines


async def busy_worker(name: str, runs: int) -> tuple[WorkerProcess, list[bytes]]:
    """A worker working through a backlog: a transaction is open nearly all the time."""
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)
    log = interleave(mixed_fleet(runs))
    await produce(settings, log)
    worker = WorkerProcess(settings, name)
    await collect(settings, settings.commands_topic, 50, 60)
    return worker, log


async def test_sigterm_to_a_healthy_worker_is_a_clean_stop_exit_0_and_no_error_logged():
    settings = fresh_settings(partitions=2)
    worker = WorkerProcess(settings, "clean")
    try:
        await wait_until_serving(settings)
        await produce(settings, interleave(mixed_fleet(20)))
        await collect(settings, settings.commands_topic, 20, 60)
        worker.proc.terminate()
        code = await asyncio.to_thread(worker.proc.wait, STOP_TIMEOUT_S + EXIT_MARGIN_S)
        assert code == 0, worker.log_tail()
        assert errors_in(worker) == [], worker.log_tail()
    finally:
        worker.stop()


@pytest.mark.solo
async def test_sigterm_ends_a_worker_stuck_on_a_frozen_broker_within_its_stop_deadline():
    worker, _ = await busy_worker("stuck", runs=1000)
    try:
        with frozen_broker():
            # The thing under test: a broker frozen for a moment, so that a transaction of the
            # backlog waits on it when SIGTERM comes (nothing outside the worker shows that it does).
            await asyncio.sleep(1.0)
            began = time.monotonic()
            worker.proc.terminate()
            try:
                code = await asyncio.to_thread(worker.proc.wait, STOP_TIMEOUT_S + EXIT_MARGIN_S)
            except subprocess.TimeoutExpired:
                code = None
            took = time.monotonic() - began
        assert code is not None, f"still running {took:.1f} s after SIGTERM:\n{worker.log_tail()}"
        assert code == ABANDONED_EXIT_CODE, worker.log_tail()
        assert not [
            line for line in errors_in(worker) if "CancelledError" in line or "Exception in callback" in line
        ], worker.log_tail()
    finally:
        worker.stop()


@pytest.mark.solo
async def test_a_transaction_the_frozen_broker_timed_out_is_rebuilt_and_the_worker_lives():
    worker, log = await busy_worker("frozen", runs=1000)
    try:
        with frozen_broker():
            await asyncio.sleep(FREEZE_S)  # the thing under test: a freeze past the transaction timeout
        expected = by_run(replay_commands(log))
        got = await collect(
            worker.settings, worker.settings.commands_topic, sum(map(len, expected.values())), 120
        )
        # On the thaw, the broker's abort of the old transaction races the worker's retries of
        # it: mostly the abort wins (and the worker exited 1 before), sometimes the commit does.
        assert worker.alive(), worker.log_tail()
        assert {run: by_run(got).get(run) for run in expected} == expected
    finally:
        worker.stop()


@pytest.mark.xdist_group("cuttable-link")
async def test_a_commit_held_past_the_transaction_timeout_with_no_successor_is_rebuilt():
    # The deterministic form of the frozen broker: the worker's link is cut as it sends a
    # commit, and healed after the broker aborted the transaction for its age. Its session
    # lapsed too, but no other worker exists: the fencing it meets on the heal is no successor's.
    settings = fresh_settings(partitions=2)
    log = interleave(mixed_fleet(200))
    expected = by_run(replay_commands(log))
    async with CuttableLink() as link:
        worker = WorkerProcess(settings, "held", env={"STALLWATCH_BOOTSTRAP": link.bootstrap})
        try:
            await wait_until_serving(settings)
            producing = asyncio.create_task(produce(settings, log, pause_every=80, pause_s=0.1))
            # The load flows (a batch of the log committed, beside the probe's): the cut holds its next.
            await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= 2)
            link.cut_at(END_TXN)
            await asyncio.wait_for(link.cut_seen.wait(), 15)
            # The thing under test: a commit held past the transaction timeout, and past the
            # broker's check for timed-out transactions (10 s).
            await asyncio.sleep(HOLD_S)
            link.heal()
            await producing
            got = await collect(settings, settings.commands_topic, sum(map(len, expected.values())), 120)
            assert worker.alive(), worker.log_tail()
            assert "outlived the transaction timeout" in worker.log_path.read_text(), worker.log_tail()
            assert {run: by_run(got).get(run) for run in expected} == expected
        finally:
            await asyncio.to_thread(worker.stop)
