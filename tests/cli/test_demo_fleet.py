"""`stallwatch demo`'s fleet scene on the real broker: the worker and the fleet app as processes;
the incident opens, every run of the crowd gets the words once and turns away, it closes."""

from __future__ import annotations

import asyncio

import pytest

from stallwatch.cli import demo, demo_fleet
from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import fresh_settings

pytestmark = pytest.mark.kafka


async def test_a_tool_breaking_for_everyone_opens_an_incident_tells_the_runs_and_closes(capsys):
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)
    worker = demo.start_worker(settings)
    fleet_app = demo_fleet.start_fleet_app(settings)
    try:
        await demo.wait_for_worker(settings, worker)
        assert await demo_fleet.wait_for_fleet_app(fleet_app), fleet_app.log_path.read_text()[-3000:]
        crowd = await demo_fleet.broken_tool_scene(settings, "t1")
    finally:
        await asyncio.to_thread(fleet_app.stop)
        worker.terminate()
        await asyncio.to_thread(worker.wait, 30)
    printed = capsys.readouterr().out
    assert "incident OPEN   tool_failing `search`" in printed
    assert "incident CLOSED tool_failing `search`" in printed
    assert all(member.told for member in crowd)
    for member in crowd:
        nudges = [n for n in member.run.nudges if n.detail.get("kind") == "tool_failing"]
        assert len(nudges) == 1 and nudges[0].detail["tool"] == "search"
        # Told long before its own rule (10 failures in a row) would have stopped it.
        assert member.run.stop is None
        assert member.calls.get("search failed", 0) < demo_fleet.OWN_FAILURE_LIMIT


def test_the_fleet_apps_errors_are_found_in_its_log(tmp_path):
    log = tmp_path / "fleet.log"
    log.write_text(
        "[2026-12-03 10:26:33,925] [25811] [INFO] [^Worker]: Ready \n"
        "[2026-12-03 10:26:40,743] [25811] [ERROR] judge: offset 0 not applied \n"
        "Traceback (most recent call last):\n"
        "[2026-12-03 10:27:25,646] [25811] [WARNING] Timer is overlapping \n"
    )
    app = demo_fleet.FleetApp(proc=None, log_path=log)  # type: ignore[arg-type]
    assert [line.split("] ", 3)[3] for line in app.errors()] == ["judge: offset 0 not applied "]
