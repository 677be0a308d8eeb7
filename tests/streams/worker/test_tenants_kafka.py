"""Tenants on one worker, on a real broker: each tenant's topics (`stallwatch tenants add`) are
served as soon as they exist, the tenant of every run is its topic's, and what one tenant writes
on its own topic, however forged, changes none of another tenant's decisions."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.client import KafkaClient
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.engine.test_fleet_advisory import advisory
from tests.kafka_harness import (
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    run_cli,
    wait_until_serving,
)
from tests.script import RunScript
from tests.streams.fleet.harness import Reader
from tests.streams.worker.faults import MODELS
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka


def forgeries(victims: list[RunScript]) -> list[bytes]:
    """What a hostile tenant sends about another tenant's runs, knowing their ids: their start
    under the victim's tenant, their end, a round far past the limit, a time far ahead, the
    victim's next call, and an advisory for the victim's tool."""
    lines = []
    for victim in victims:
        forged = RunScript(victim.run_id)
        forged.events[0]["tenant"] = "globex"
        forged.add("round_ended", round=40)
        forged.ts += 1e9
        forged.start_round()
        forged.call("search", {"q": "same"})
        forged.add("run_ended")
        lines += forged.lines()
        lines.append(orjson.dumps({**advisory(victim.run_id), "tenant": "globex"}))
    return lines


@pytest.mark.parametrize("model", MODELS)
async def test_each_tenant_is_served_on_its_own_topics_and_no_tenant_decides_anothers_runs(model: str):
    settings = fresh_settings(4)
    acme, globex = settings.for_tenant("acme"), settings.for_tenant("globex")
    worker = WorkerProcess(settings, env={**MODELS[model], "STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5"})
    try:
        await wait_until_serving(settings)
        added = run_cli(settings, "tenants", "add", "acme", "globex")
        assert added.returncode == 0, added.stderr
        assert acme.events_topic in added.stdout
        for tenant in (acme, globex):
            await wait_until_serving(tenant)
        victims = mixed_fleet(16)
        theirs = interleave(victims)
        ours = forgeries(victims)
        expected = {
            tenant.tenant: by_run(replay_commands(log, tenant=tenant.tenant))
            for tenant, log in ((globex, theirs), (acme, ours))
        }
        await produce(acme, ours)
        await produce(globex, theirs)
        got = {
            tenant.tenant: by_run(
                await collect(
                    tenant, tenant.commands_topic, sum(map(len, expected[tenant.tenant].values())), 60
                )
            )
            for tenant in (acme, globex)
        }
        letters = await collect(acme, acme.deadletter_topic, 2 * len(victims), 30)
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    for tenant in ("globex", "acme"):
        runs = got[tenant]
        assert {run: runs.get(run) for run in expected[tenant]} == expected[tenant], tenant
    # The victims' decisions are exactly those of their own log, though the same forgeries on
    # the victims' own topic would have changed them.
    assert by_run(replay_commands(ours + theirs)) != expected["globex"]
    assert any(orjson.loads(c)["type"] == "stop" for cs in got["globex"].values() for c in cs)
    assert sorted(orjson.loads(x)["error"].split(";")[0] for x in letters) == [
        "the event names another tenant than its topic's (acme)"
    ] * (2 * len(victims))
    assert _tenants_counted(worker) >= {"acme", "globex"}


def _tenants_counted(worker: WorkerProcess) -> set[str]:
    """The tenants whose pipelines the worker's log says it serves."""
    return {
        line.split("tenant ", 1)[1].split(":", 1)[0]
        for line in worker.log_tail(400).splitlines()
        if "serving its events topic" in line
    }


def test_a_tenant_name_that_cannot_name_topics_is_refused_in_one_line():
    result = run_cli(Settings(), "tenants", "add", "a.b")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "tenant name" in result.stderr


async def test_a_runtime_set_for_its_tenant_is_judged_on_its_tenants_topics():
    settings = fresh_settings(2)
    acme = settings.for_tenant("acme")
    await ensure_topics(acme)
    worker = WorkerProcess(settings, env={"STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5"})
    try:
        await wait_until_serving(acme)
        async with KafkaClient(acme, verdict_timeout_s=20) as client:
            run = await client.start_run("same-id", "researcher", [{"name": "search"}])
            await run.start_round()
            _, first = await run.propose("search", {"q": "x"})
            _, again = await run.propose("search", {"q": "x"})
        assert first.allowed and not first.timed_out
        assert (again.allowed, again.code) == (False, "duplicate_call")
        async with Reader(acme, acme.commands_topic) as commands:
            values = await commands.until(lambda vs: len([v for v in vs if v["run_id"] == "same-id"]) >= 2)
        async with Reader(settings, settings.commands_topic) as shared:
            await shared.poll(1.0)
        assert not [v for _, v in shared.records if v["run_id"] == "same-id"]
        assert {v["run_id"] for v in values} >= {"same-id"}
    finally:
        worker.stop()
