"""Each incident kind opened, updated and closed by the fleet app as a real process."""

from __future__ import annotations

import time

import pytest

from stallwatch.contract.events import EVENT_ADAPTER
from stallwatch.contract.incidents import Incident, incident_id
from tests.kafka_harness import fresh_settings
from tests.streams.fleet.harness import FleetProcess, Reader, Tallies, tally
from tests.waiting import until

pytestmark = pytest.mark.kafka


def _by_kind(values: list[dict], kind: str) -> list[dict]:
    return [v for v in values if v["kind"] == kind]


@pytest.mark.parametrize("kind", ["tool_failing", "tool_same_answer", "tool_looping"])
async def test_an_incident_opens_once_is_updated_then_closes_and_tells_the_live_runs(kind: str) -> None:
    settings = fresh_settings()
    fleet = FleetProcess(settings)
    try:
        await fleet.serving()
        now = float(int(time.time()))
        runs = [f"run-{i}" for i in range(6)]

        def crossing(i: int, ts: float) -> dict:
            if kind == "tool_failing":
                return tally("search", ts, runs=[runs[i]], calls=2, failures=2)
            if kind == "tool_same_answer":
                return tally(
                    "search",
                    ts,
                    runs=[runs[i]],
                    calls=1,
                    answers=[{"fingerprint": "f" * 32, "runs": [runs[i]], "args": [f"{i:032x}"]}],
                )
            return tally("search", ts, runs=[runs[i]], stops=[runs[i]] if i < 5 else [])

        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.incidents_topic) as incidents,
            Reader(settings, settings.events_topic) as events,
        ):
            # Four runs: under every threshold, nothing opens; a healthy tool beside it never does.
            await tallies.send(
                [crossing(i, now) for i in range(4)] + [tally("fetch", now, runs=runs, calls=12)]
            )
            await incidents.poll(3.0)
            assert incidents.records == []
            # The fifth run crosses it (and a sixth, live, run used the tool too).
            await tallies.send([crossing(4, now + 0.5), crossing(5, now + 0.5)])
            values = await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            opened = Incident.model_validate(values[-1])
            assert (opened.kind, opened.tool, opened.tenant) == (kind, "search", "acme")
            assert opened.incident_id == incident_id("acme", "search", kind, opened.opened_window_start)
            assert [o["incident_id"] for o in fleet.open_incidents()] == [opened.incident_id]
            # Listed per tenant only: no other tenant's view, nor the shared topic's, shows it.
            assert fleet.open_incidents("globex") == [] and fleet.open_incidents(None) == []
            # More of the same a little later: the same incident, updated.
            await tallies.send([crossing(i, now + 2.5) for i in range(6)])
            later = opened.last_held_at
            values = await incidents.until(lambda vs: any(v["last_held_at"] > later for v in vs))
            assert {v["incident_id"] for v in values} == {opened.incident_id}
            # The tool recovers; healthy tallies move event time past the quiet window: closed.
            for step in range(1, 12):
                await tallies.send([tally("search", now + 2.5 + step, runs=["run-9"], calls=1)])
            values = await incidents.until(lambda vs: any(v["state"] == "closed" for v in vs))
            assert {v["incident_id"] for v in values} == {opened.incident_id}
            assert [v["state"] for v in values][-1] == "closed"
            assert fleet.open_incidents() == []
            # Advisories: each live run that used the tool while the rule held (run-9 joined while
            # it was open), once per phase; stopped runs skipped.
            live = {"run-5", "run-9"} if kind == "tool_looping" else {*runs, "run-9"}
            # Every closed advisory, however the fleet app's sends interleave with the read (one
            # closed advisory seen, then a fixed wait, lost the last ones under load).
            await events.until(lambda vs: sum(v["incident"] == "closed" for v in vs) >= len(live))
            await events.poll(1.0)  # and nothing more than those
            told = [EVENT_ADAPTER.validate_python(v) for _, v in events.records]
            opens = [e for e in told if e.incident == "open"]
            assert sorted(e.run_id for e in opens) == sorted(live)
            assert {e.incident_id for e in told} == {opened.incident_id}
            assert sorted(e.run_id for e in told if e.incident == "closed") == sorted(live)
            assert fleet.metric(f'stallwatch_fleet_incidents_opened_total{{kind="{kind}"}}') == 1
            # Caught up: the tallies' lag falls to the transaction markers (one per partition
            # after the last commit: the committed offset stops before it).
            lag = 'stallwatch_fleet_consumer_lag{topic="tallies"}'
            await until(
                lambda: fleet.has_metric(lag) and fleet.metric(lag) <= settings.partitions,
                20,
                lambda: f"the tallies' lag down to the markers: {fleet.metric(lag)}",
                interval_s=0.2,
            )
    finally:
        fleet.stop()
