"""The in-process client takes a fleet advisory as the worker does: words once, the breaker."""

from __future__ import annotations

import time

from stallwatch.client import EmbeddedClient
from stallwatch.contract.events import advisory_event_id


def advisory(run_id: str, incident: str = "open") -> dict:
    return {
        "v": 1,
        "type": "fleet_advisory",
        "run_id": run_id,
        "ts": time.time(),
        "event_id": advisory_event_id("inc-9", run_id, incident),
        "incident_id": "inc-9",
        "incident": incident,
        "kind": "tool_failing",
        "tool": "search",
        "window_s": 300.0,
        "evidence": {"calls": 10, "failures": 9, "runs": 5},
    }


async def test_the_run_hears_once_and_its_breaker_holds_until_the_close():
    async with EmbeddedClient() as client:
        run = await client.start_run("r1", "researcher", [{"name": "search"}], policy={"fleet_breaker": True})
        await run.start_round()
        await client.advise(advisory("r1"))
        await client.advise(advisory("r1"))  # repeated: a redelivery
        assert [n.reason for n in run.nudges] == [
            "`search` failed in 9 of 10 calls across 5 runs in the last 5 minutes: don't retry "
            "it; use another tool or answer from what you have."
        ]
        _, refused = await run.propose("search", {"q": 1})
        assert not refused.allowed and refused.code == "fleet_incident"
        await client.advise(advisory("r1", "closed"))
        _, allowed = await run.propose("search", {"q": 1})
        assert allowed.allowed and len(run.nudges) == 1


async def test_an_ended_run_hears_nothing():
    async with EmbeddedClient() as client:
        run = await client.start_run("r2", "researcher", [{"name": "search"}])
        await run.end()
        await client.advise(advisory("r2"))
        assert run.nudges == []
