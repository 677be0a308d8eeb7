"""The run store's gauges on a real broker: right from the start after a restart (not a scan
later), and counting live runs only (an ended run is kept a while, but runs no more)."""

from __future__ import annotations

import pytest

from tests.kafka_harness import (
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.script import RunScript

pytestmark = pytest.mark.kafka


async def test_the_gauges_count_live_runs_and_their_fingerprints_from_the_start():
    settings = fresh_settings(partitions=2)
    live, ended = RunScript("live-run"), RunScript("ended-run")
    for script in (live, ended):
        for r in range(3):
            script.round_of(("search", {"q": r}, {"docs": [script.run_id, r]}))
    ended.end()
    lines = live.lines() + ended.lines()
    commands = sum(len(c) for c in by_run(replay_commands(lines)).values())
    worker = WorkerProcess(settings, "first")
    try:
        await wait_until_serving(settings)
        await produce(settings, lines)
        await collect(settings, settings.commands_topic, commands, 60)
        # The probe's run is unknown (a call of no run started): no place, no state.
        await worker.until_metric("stallwatch_active_runs", lambda n: n == 1)
    finally:
        worker.stop()
    # A second worker: its gauges are the restored runs' before any batch or scan.
    worker = WorkerProcess(settings, "second", env={"STALLWATCH_EXPIRY_INTERVAL_S": "3600"})
    try:
        await worker.ready()
        await worker.until_metric("stallwatch_active_runs", lambda n: n == 1)
        # The live run's three results; the ended run released its own.
        await worker.until_metric("stallwatch_fingerprints_held", lambda n: n == 3)
    finally:
        worker.stop()
