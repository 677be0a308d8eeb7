"""The worker on a real broker answers a fleet advisory with the run's nudge, once."""

from __future__ import annotations

import orjson
import pytest

from tests.cli.test_replay_fleet_advisory import log_with_advisories
from tests.kafka_harness import SETTLE_S, by_run, collect, produce, replay_commands, serving_worker

pytestmark = pytest.mark.kafka


async def test_the_worker_nudges_once_per_advisory_and_agrees_with_replay():
    async with serving_worker() as (settings, worker):
        log = log_with_advisories()  # "told" gets the same advisory twice (same event_id)
        expected = replay_commands(log)
        await produce(settings, log)
        got = await collect(settings, settings.commands_topic, len(expected), 20, settle_s=SETTLE_S)
        runs = {
            run: commands for run, commands in by_run(got).items() if not run.startswith("probe-")
        }  # the harness's probe run, sent before the log
        assert runs == by_run(expected)
        nudges = [orjson.loads(c) for c in got if orjson.loads(c)["type"] == "nudge"]
        assert sorted(n["run_id"] for n in nudges) == ["breaker", "told"]
        assert all(
            n["caused_by"].startswith("fa-") and "failed in 31 of 40 calls" in n["reason"] for n in nudges
        )
        assert worker.alive()
