"""The fleet app's memory under a flood of tool names, and a broker restart survived."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from stallwatch.contract.incidents import Incident
from tests.kafka_harness import fresh_settings, kafka
from tests.streams.fleet.harness import FleetProcess, Reader, Tallies, tally

pytestmark = pytest.mark.kafka

# The stated bound: 100,000 distinct tool names through a fleet worker capped at 20,000 keys
# stay under 300 MB resident (the app idles at ~70 MB; a tracked key costs ~2-3 KB).
FLOOD_TOOLS = 100_000
MAX_KEYS = 20_000
RSS_BOUND = 300 * 1024 * 1024


async def test_a_hundred_thousand_tool_names_keep_memory_under_the_bound() -> None:
    settings = fresh_settings()
    # One tenant's tool names, all of them: its share is the whole cap here (the per-tenant
    # quota has a test of its own, below).
    fleet = FleetProcess(
        settings,
        env={
            "STALLWATCH_FLEET_MAX_KEYS": str(MAX_KEYS),
            "STALLWATCH_FLEET_MAX_KEYS_PER_TENANT": str(FLOOD_TOOLS),
        },
    )
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with Tallies(settings) as tallies:
            for start in range(0, FLOOD_TOOLS, 5_000):
                await tallies.send(
                    [tally(f"tool-{k}", now, runs=[f"run-{k}"], calls=1) for k in range(start, start + 5_000)]
                )
        # A scrape of a hundred thousand keys' metrics is not free: looked at every second.
        await fleet.until_metric("stallwatch_fleet_partials_total", lambda n: n >= FLOOD_TOOLS, 400, 1.0)
        assert fleet.metric("stallwatch_fleet_tracked_keys") <= MAX_KEYS
        assert fleet.metric("stallwatch_fleet_evicted_keys_total") >= FLOOD_TOOLS - MAX_KEYS
        assert fleet.rss() < RSS_BOUND, f"{fleet.rss() / 1e6:.0f} MB"
    finally:
        fleet.stop()


async def test_eviction_spares_keys_with_an_open_incident_and_closes_them_only_when_all_have_one() -> None:
    # One partition, so that every key shares one worker's LRU; room for two keys.
    settings = fresh_settings(partitions=1)
    fleet = FleetProcess(settings, env={"STALLWATCH_FLEET_MAX_KEYS": "2"})
    now = float(int(time.time()))
    failing = [f"run-{i}" for i in range(5)]
    try:
        await fleet.serving()
        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.incidents_topic) as incidents,
            Reader(settings, settings.events_topic) as events,
        ):
            await tallies.send([tally("search", now, runs=[run], calls=2, failures=2) for run in failing])
            values = await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            opened = Incident.model_validate(values[-1])
            # Two quiet tools: the second evicts the first, never the key with the open incident.
            judged = fleet.metric("stallwatch_fleet_partials_total")
            for k in range(2):  # each judged before the next, so that the first is the older
                await tallies.send([tally(f"quiet-{k}", now + 1 + k, runs=["run-9"], calls=1)])
                await fleet.until_metric(
                    "stallwatch_fleet_partials_total", lambda n, k=k: n >= judged + k + 1
                )
            await fleet.until_metric("stallwatch_fleet_evicted_keys_total", lambda n: n >= 1)
            assert [i["incident_id"] for i in fleet.open_incidents()] == [opened.incident_id]
            # "quiet-1" fails for five runs too: now every key has an open incident, and a new
            # tool evicts the least recently updated, "search", closing its incident.
            await tallies.send(
                [tally("quiet-1", now + 3, runs=[run], calls=2, failures=2) for run in failing]
            )
            await incidents.until(lambda vs: sum(v["state"] == "open" for v in vs) >= 2)
            await tallies.send([tally("new", now + 4, runs=["run-9"], calls=1)])
            values = await incidents.until(lambda vs: any(v["state"] == "closed" for v in vs))
            [closed] = [Incident.model_validate(v) for v in values if v["state"] == "closed"]
            assert closed.incident_id == opened.incident_id
            told = await events.until(lambda vs: sum(v.get("incident") == "closed" for v in vs) >= 5)
            assert sorted(v["run_id"] for v in told if v.get("incident") == "closed") == [
                f"run-{i}" for i in range(5)
            ]
        assert fleet.metric("stallwatch_fleet_evicted_open_keys_total") == 1
        assert [i["tool"] for i in fleet.open_incidents()] == ["quiet-1"]
    finally:
        fleet.stop()


@pytest.mark.solo
async def test_a_broker_restart_is_survived() -> None:
    settings = fresh_settings()
    fleet = FleetProcess(settings)
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with Tallies(settings) as tallies:
            await tallies.send(
                [tally("search", now, runs=[f"run-{i}"], calls=2, failures=2) for i in range(3)]
            )
        await fleet.until_metric("stallwatch_fleet_partials_total", lambda n: n >= 1)  # the tallies judged
        kafka("down")
        await asyncio.sleep(3.0)  # the thing under test: the broker away for a while
        kafka("up")
        async with Tallies(settings) as tallies, Reader(settings, settings.incidents_topic) as incidents:
            await tallies.send(
                [tally("search", now + 1, runs=[f"run-{i}"], calls=2, failures=2) for i in range(3, 5)]
            )
            values = await incidents.until(lambda vs: any(v["state"] == "open" for v in vs), timeout_s=120)
            assert values[-1]["evidence"]["runs"] == 5
        assert fleet.alive()
    finally:
        fleet.stop()


async def test_one_tenants_flood_of_tool_names_stops_at_its_quota_and_spares_the_others() -> None:
    settings = fresh_settings(partitions=1)
    fleet = FleetProcess(
        settings, env={"STALLWATCH_FLEET_MAX_KEYS": "50", "STALLWATCH_FLEET_MAX_KEYS_PER_TENANT": "10"}
    )
    now = float(int(time.time()))
    failing = [f"run-{i}" for i in range(5)]
    try:
        await fleet.serving()
        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.incidents_topic) as incidents,
            Reader(settings, settings.deadletter_topic) as letters,
        ):
            await tallies.send(
                [tally("search", now, tenant="victim", runs=[run], calls=2, failures=2) for run in failing]
            )
            await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            await tallies.send(
                [
                    tally(f"made-up-{k}", now + 1, tenant="flooder", runs=["run-9"], calls=1)
                    for k in range(100)
                ]
            )
            refused = await letters.until(lambda vs: len(vs) >= 90)
        assert {v["error"] for v in refused} == {
            "its tenant already has 10 (tenant, tool) keys on this fleet worker, the quota "
            "(STALLWATCH_FLEET_MAX_KEYS_PER_TENANT)"
        }
        assert fleet.metric("stallwatch_fleet_evicted_keys_total") == 0
        assert [(i["tenant"], i["tool"]) for i in fleet.open_incidents("victim")] == [("victim", "search")]
        assert fleet.open_incidents("flooder") == [] and fleet.open_incidents(None) == []
    finally:
        fleet.stop()


def at_caps(tool: str, ts: float, tenant: str) -> dict[str, Any]:
    """A tally that fills every cap of its bucket: 64 runs and stops, 16 answers of 16 runs and
    16 argument digests, every run id 128 characters."""
    ids = [f"{tenant}-{tool}-{ts}-{i}".ljust(128, "x") for i in range(64)]
    answers = [
        {
            "fingerprint": f"{a:02x}".rjust(32, "f"),
            "runs": ids[a : a + 16],
            "args": [f"{a:02x}{i:02x}".rjust(32, "a") for i in range(16)],
        }
        for a in range(16)
    ]
    return tally(tool, ts, tenant=tenant, runs=ids, stops=ids, calls=64, answers=answers)


async def test_one_tenants_keys_at_their_caps_stop_at_its_budget_and_another_tenants_incident_opens() -> None:
    settings = fresh_settings(partitions=1)
    budget = 4 << 20
    fleet = FleetProcess(settings, env={"STALLWATCH_FLEET_MAX_BYTES_PER_TENANT": str(budget)})
    now = float(int(time.time()))
    flood = [f"made-up-{k}" for k in range(20)]
    try:
        await fleet.serving()
        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.incidents_topic) as incidents,
            Reader(settings, settings.deadletter_topic) as letters,
        ):
            # Six buckets of each made-up tool, every cap full: about 0.6 MB a key.
            for step in range(6):
                await tallies.send([at_caps(tool, now + step, "flooder") for tool in flood])
            refused = await letters.until(lambda vs: len(vs) >= 1, timeout_s=120)
            await tallies.send(
                [
                    tally("search", now + 6, tenant="victim", runs=[f"run-{i}"], calls=2, failures=2)
                    for i in range(5)
                ]
            )
            opened = await incidents.until(lambda vs: any(v["tenant"] == "victim" for v in vs), timeout_s=120)
        assert [(v["tenant"], v["tool"], v["state"]) for v in opened if v["tenant"] == "victim"][:1] == [
            ("victim", "search", "open")
        ]
        assert all(
            v["error"].startswith("its tenant's (tenant, tool) keys would hold")
            and "STALLWATCH_FLEET_MAX_BYTES_PER_TENANT" in v["error"]
            for v in refused
        ), refused
        assert (
            fleet.metric('stallwatch_fleet_tenant_quota_total{outcome="memory_quota",tenant="flooder"}') >= 1
        )
        held = fleet.metric('stallwatch_fleet_state_bytes{tenant="flooder"}')
        assert 0 < held <= budget + 1.5e6, held  # a key's growth at most past it
        assert fleet.metric('stallwatch_fleet_state_bytes{tenant="victim"}') > 0
        assert fleet.open_incidents("victim")[0]["tool"] == "search"
        # The refusals are logged by the key's fingerprint: no tool name in the log.
        log = fleet.log_path.read_text(errors="replace")
        assert "memory_quota" in log and not any(tool in log for tool in flood)
    finally:
        fleet.stop()
