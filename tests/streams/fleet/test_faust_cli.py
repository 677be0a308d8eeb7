"""Faust's own command line runs the same app: `faust -A stallwatch_streams.fleet.app worker`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import fresh_settings
from tests.streams.fleet.harness import FleetProcess, Reader, Tallies, tally

pytestmark = pytest.mark.kafka


async def test_faust_worker_on_the_fleet_app_opens_an_incident() -> None:
    settings = fresh_settings()
    await ensure_topics(settings)  # Faust's CLI creates only Faust's own topics
    fleet = FleetProcess(
        settings,
        "cli",
        command=[
            str(Path(sys.executable).parent / "faust"),
            "-A",
            "stallwatch_streams.fleet.app",
            "worker",
            "-l",
            "info",
        ],
    )
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with Tallies(settings) as tallies, Reader(settings, settings.incidents_topic) as incidents:
            await tallies.send(
                [tally("search", now, runs=[f"run-{i}"], calls=1, failures=1) for i in range(5)]
            )
            values = await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            assert values[-1]["kind"] == "tool_failing"
    finally:
        fleet.stop()
