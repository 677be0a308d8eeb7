"""A worker, the fleet app, a tenant's runtime and a one-team runtime, each under its own
principal and the ACLs as shipped, with SASL PLAIN and with OAUTHBEARER: the worker judges the
shared topics and the tenant's, and the fleet app's advisory reaches the tenant's runs through
its events topic."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stallwatch.client import KafkaClient
from stallwatch.contract.envelope import envelope
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.kafka_harness import WorkerProcess
from tests.security.conftest import SecureBroker
from tests.security.test_acls import add_tenants
from tests.streams.fleet.harness import FleetProcess

# The secure broker is started and stopped by these tests: one xdist worker runs them all.
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("secure-broker")]

TOOLS = [{"name": "search"}]


def failing_run(run_id: str, ts: float) -> list[bytes]:
    """A run whose one call of `search` failed: five of them open a tool_failing incident."""
    events = [
        envelope("run_started", run_id, f"{run_id}:0", ts, mode="researcher", tools=TOOLS),
        envelope("round_started", run_id, f"{run_id}:1", ts, round=1),
        envelope(
            "call_proposed",
            run_id,
            f"{run_id}:2",
            ts,
            round=1,
            call_id="c1",
            tool="search",
            args={"q": run_id},
        ),
        envelope(
            "call_result",
            run_id,
            f"{run_id}:3",
            ts,
            round=1,
            call_id="c1",
            tool="search",
            status="error",
            result={"error": "upstream timeout"},
        ),
        envelope("round_ended", run_id, f"{run_id}:4", ts, round=1),
    ]
    return [orjson.dumps(e) for e in events]


async def judged(runtime: Settings, timeout_s: float = 90.0) -> None:
    """Until a worker answers the runtime's client (its pipeline for those topics is serving)."""
    deadline = time.monotonic() + timeout_s
    async with KafkaClient(runtime, verdict_timeout_s=3.0) as client:
        while time.monotonic() < deadline:
            run = await client.start_run(f"probe-{time.monotonic_ns()}", "researcher", TOOLS)
            await run.start_round()
            _, first = await run.propose("search", {"q": "x"})
            _, again = await run.propose("search", {"q": "x"})
            if not first.timed_out and not again.timed_out:
                assert (first.allowed, again.allowed, again.code) == (True, False, "duplicate_call")
                return
    raise AssertionError(f"no worker judged the calls on {runtime.events_topic}")


async def nudged_runs(tenant: Settings, runs: set[str], timeout_s: float = 90.0) -> set[str]:
    """The runs among `runs` whose commands on the tenant's topic carry an incident's nudge."""
    consumer = AIOKafkaConsumer(
        tenant.commands_topic,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **aiokafka_options(tenant),
    )
    await consumer.start()
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while seen < runs and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    command = orjson.loads(record.value)
                    if (
                        command["type"] == "nudge"
                        and "incident_id" in command["detail"]
                        and command["run_id"] in runs
                    ):  # the probes used the tool too
                        seen.add(command["run_id"])
    finally:
        await consumer.stop()
    return seen


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
async def test_each_part_under_its_own_principal_judges_a_team_and_a_tenant_and_advises_the_tenant(
    secure_broker: SecureBroker, prefix: str, mechanism: str
):
    admin = secure_broker.settings("admin", prefix)
    await ensure_topics(admin)
    add_tenants(secure_broker, prefix, "acme")
    secure_broker.acls(prefix, "worker", "User:stallwatch-worker")
    secure_broker.acls(prefix, "fleet", "User:stallwatch-fleet")
    secure_broker.acls(prefix, "tenant", "acme", "User:tenant-a", "User:stallwatch-fleet")
    secure_broker.acls(prefix, "team", "User:team")
    acme = secure_broker.settings("tenant-a", prefix, mechanism, tenant="acme")
    team = secure_broker.settings("team", prefix, mechanism)
    worker = WorkerProcess(
        admin,
        env={**secure_broker.env("stallwatch-worker", mechanism), "STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5"},
    )
    fleet = FleetProcess(
        admin,
        env={**secure_broker.env("stallwatch-fleet", mechanism), "STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5"},
    )
    try:
        await asyncio.gather(judged(acme), judged(team), fleet.serving())
        failing = {f"live-{i}" for i in range(5)}
        producer = AIOKafkaProducer(acks="all", **aiokafka_options(acme))
        await producer.start()
        try:
            for run_id in sorted(failing):
                for line in failing_run(run_id, time.time()):
                    await producer.send(acme.events_topic, line, key=run_id.encode())
            await producer.flush()
        finally:
            await producer.stop()
        assert await nudged_runs(acme, failing) == failing
        assert worker.alive() and fleet.alive()
    finally:
        fleet.stop()
        worker.stop()
    for process in (worker, fleet):
        assert "AuthorizationFailed" not in process.log_path.read_text(errors="replace"), process.log_tail()
