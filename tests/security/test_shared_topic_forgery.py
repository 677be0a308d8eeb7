"""The issue's forgery on a real broker with SASL and the shipped ACLs: a one-team principal
writes five failing runs labelled `tenant: "acme"` on the shared events topic. They become dead
letters; the fleet app opens no incident of acme's (while it does open the shared topic's own,
from the same principal's unlabelled runs), and acme's live `fleet_breaker` run is not refused."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stallwatch.client import KafkaClient
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.kafka_harness import WorkerProcess
from tests.security.conftest import SecureBroker
from tests.security.test_acls import add_tenants
from tests.security.test_served_under_acls import TOOLS, failing_run, judged
from tests.streams.fleet.harness import FleetProcess

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("secure-broker")]


def labelled(lines: list[bytes], tenant: str) -> list[bytes]:
    out = []
    for line in lines:
        event = orjson.loads(line)
        if event["type"] == "run_started":
            event["tenant"] = tenant
        out.append(orjson.dumps(event))
    return out


async def read_until(settings: Settings, topic: str, done, timeout_s: float = 120.0) -> list[dict]:
    """The records of `topic` (as JSON) from the start, until `done(records)` or the deadline."""
    consumer = AIOKafkaConsumer(
        topic, enable_auto_commit=False, auto_offset_reset="earliest", **aiokafka_options(settings)
    )
    await consumer.start()
    values: list[dict] = []
    try:
        deadline = time.monotonic() + timeout_s
        while not done(values) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values += [orjson.loads(r.value) for r in records if r.value]
    finally:
        await consumer.stop()
    return values


async def test_a_team_labelling_runs_as_acmes_on_the_shared_topic_changes_nothing_of_acmes(
    secure_broker: SecureBroker, prefix: str
):
    admin = secure_broker.settings("admin", prefix)
    await ensure_topics(admin)
    add_tenants(secure_broker, prefix, "acme")
    secure_broker.acls(prefix, "worker", "User:stallwatch-worker")
    secure_broker.acls(prefix, "fleet", "User:stallwatch-fleet")
    secure_broker.acls(prefix, "tenant", "acme", "User:tenant-a", "User:stallwatch-fleet")
    secure_broker.acls(prefix, "team", "User:team")
    acme = secure_broker.settings("tenant-a", prefix, tenant="acme")
    team = secure_broker.settings("team", prefix)
    env = {"STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5"}
    worker = WorkerProcess(admin, env={**secure_broker.env("stallwatch-worker"), **env})
    fleet = FleetProcess(admin, env={**secure_broker.env("stallwatch-fleet"), **env})
    try:
        await asyncio.gather(judged(acme), judged(team), fleet.serving())
        now = time.time()
        producer = AIOKafkaProducer(acks="all", **aiokafka_options(team))
        await producer.start()
        try:
            for n in range(5):  # the forgery, then the team's own failing runs of another tool
                for line in labelled(failing_run(f"forged-{n}", now), "acme"):
                    await producer.send(team.events_topic, line, key=f"forged-{n}".encode())
            for n in range(5):
                for line in failing_run(f"own-{n}", now):
                    line = line.replace(b'"search"', b'"fetch"')
                    await producer.send(team.events_topic, line, key=f"own-{n}".encode())
            await producer.flush()
        finally:
            await producer.stop()

        def shared_fetch_opened(values: list[dict]) -> bool:
            return any(v.get("tenant") is None and v.get("tool") == "fetch" for v in values)

        # The team's own incident opens: the fleet app has counted everything written before it.
        incidents = await read_until(admin, admin.incidents_topic, shared_fetch_opened)
        assert shared_fetch_opened(incidents), "the shared topic's own incident opened"
        assert not [v for v in incidents if v.get("tenant") == "acme"]
        forged = "names a tenant on the shared events topic"
        letters = await read_until(
            admin, admin.deadletter_topic, lambda vs: sum(forged in v.get("error", "") for v in vs) >= 5
        )
        assert sum(forged in v.get("error", "") for v in letters) == 5  # the five run_started
        async with KafkaClient(acme, verdict_timeout_s=10.0) as client:
            run = await client.start_run("acme-live", "researcher", TOOLS, policy={"fleet_breaker": True})
            await run.start_round()
            _, verdict = await run.propose("search", {"q": "acme's own"})
            assert verdict.allowed and not verdict.timed_out
        assert worker.alive() and fleet.alive()
    finally:
        fleet.stop()
        worker.stop()
