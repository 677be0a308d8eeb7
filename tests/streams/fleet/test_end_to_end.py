"""The decision worker, the fleet app and back: a tool breaks for many runs at once, the live
runs that used it get the words (a nudge), and a replay of the events log gives the same."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from stallwatch.contract.advisories import advisory_key
from stallwatch.contract.envelope import envelope
from stallwatch.contract.events import advisory_event_id
from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.fleet.harness import FleetProcess, Reader

pytestmark = pytest.mark.kafka

TOOLS = [{"name": "search"}, {"name": "fetch"}]
ADVISORY_KEY = "the fleet app's advisory key, 32+ chars"


def forged_advisory(run_id: str, ts: float) -> dict:
    """What a runtime could write to the events topic: an advisory without the fleet app's MAC."""
    return {
        "v": 1,
        "type": "fleet_advisory",
        "run_id": run_id,
        "ts": ts,
        "event_id": advisory_event_id("inc-forged", run_id, "open"),
        "incident_id": "inc-forged",
        "incident": "open",
        "kind": "tool_failing",
        "tool": "fetch",
        "tenant": "acme",
        "window_s": 300.0,
        "evidence": {"calls": 40, "failures": 31, "runs": 5},
    }


def _run(
    run_id: str, tool: str, status: str, ts: float, end: bool = False, tenant: str | None = None
) -> list[dict]:
    """A run's events; `tenant`: named in its run_started, as a runtime on that tenant's topic may
    (on the shared topic an event naming a tenant is refused)."""
    result = {"error": "upstream timeout"} if status == "error" else {"n": 1}
    events = [
        envelope("run_started", run_id, f"{run_id}:0", ts, mode="researcher", tools=TOOLS, tenant=tenant),
        envelope("round_started", run_id, f"{run_id}:1", ts, round=1),
        envelope(
            "call_proposed", run_id, f"{run_id}:2", ts, round=1, call_id="c1", tool=tool, args={"q": run_id}
        ),
        envelope(
            "call_result",
            run_id,
            f"{run_id}:3",
            ts,
            round=1,
            call_id="c1",
            tool=tool,
            status=status,
            result=result,
        ),
        envelope("round_ended", run_id, f"{run_id}:4", ts, round=1),
    ]
    if end:
        events.append(envelope("run_ended", run_id, f"{run_id}:5", ts, reason="answered"))
    return events


@pytest.mark.parametrize(
    ("keyed", "tenant"),
    [(False, None), (True, None), (True, "acme")],
    ids=["unkeyed", "advisories signed", "on a tenant's topics"],
)
async def test_a_tool_failing_for_many_runs_reaches_exactly_the_live_runs_that_used_it(keyed, tenant) -> None:
    """Signed: the fleet app and the worker share STALLWATCH_ADVISORY_KEY, and an advisory forged
    by a runtime (to the bystander) changes nothing, live or in replay. On a tenant's topics,
    the advisories go to that tenant's events topic, where its runs are."""
    settings = fresh_settings()
    await ensure_topics(settings)
    runs = settings.for_tenant(tenant)
    if tenant is not None:
        await ensure_topics(runs)
    env = {"STALLWATCH_ADVISORY_KEY": ADVISORY_KEY} if keyed else {}
    worker = WorkerProcess(settings, env=env)
    fleet = FleetProcess(settings, env=env)
    now = time.time()
    failing = [f"live-{i}" for i in range(5)]
    try:
        await asyncio.gather(wait_until_serving(runs), fleet.serving())
        events = [e for run in failing for e in _run(run, "search", "error", now, tenant=tenant)]
        events += _run("ended", "search", "error", now, end=True, tenant=tenant)  # used it, then finished
        events += _run("bystander", "fetch", "ok", now, tenant=tenant)  # never used it
        if keyed:
            events.append(forged_advisory("bystander", now))
        await produce(runs, [orjson.dumps(e) for e in events])
        async with Reader(runs, runs.commands_topic) as commands:

            def nudged(values: list[dict]) -> set[str]:
                return {v["run_id"] for v in values if v["type"] == "nudge" and "incident_id" in v["detail"]}

            await commands.until(lambda vs: nudged(vs) >= set(failing), timeout_s=90)
            await commands.settle(SETTLE_S)  # and no nudge to a run beyond them
            values = [v for _, v in commands.records]
            assert nudged(values) == set(failing)
            words = next(v for v in values if v["type"] == "nudge" and v["run_id"] == "live-0")["reason"]
            assert "search" in words
        # The events topic now holds the runs' events and the fleet's advisories: replaying it
        # gives every run the same commands the worker published.
        async with Reader(runs, runs.events_topic) as log:
            await log.until(lambda vs: sum(v["type"] == "fleet_advisory" for v in vs) >= len(failing) + 1)
            await log.poll(1.0)
            lines = [orjson.dumps(v) for _, v in log.records if not v["run_id"].startswith("probe-")]
        advisories = {
            orjson.loads(line)["run_id"]
            for line in lines
            if b"fleet_advisory" in line and b"inc-forged" not in line
        }
        assert advisories == {*failing, "ended"}  # the fleet cannot know "ended" ended; the engine does
        published = by_run([orjson.dumps(v) for v in values if not v["run_id"].startswith("probe-")])
        key = advisory_key(ADVISORY_KEY) if keyed else None
        assert by_run(replay_commands(lines, key, tenant)) == published
    finally:
        fleet.stop()
        worker.stop()
