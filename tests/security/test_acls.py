"""The ACLs as shipped (deploy/kafka/acls.sh), on a broker with SASL and authorization on: a
tenant's principal writes only its events and reads only its commands and dead letters; the
broker refuses the rest, whatever the tenant writes in its events."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.security.conftest import ROOT, SecureBroker

pytestmark = pytest.mark.kafka


def add_tenants(broker: SecureBroker, prefix: str, *names: str) -> None:
    """`stallwatch tenants add` as the administrator."""
    env = {**os.environ, **broker.env("admin"), "STALLWATCH_BOOTSTRAP": broker.bootstrap,
           "STALLWATCH_TOPIC_PREFIX": prefix, "STALLWATCH_PARTITIONS": "2",
           "STALLWATCH_REPLICATION_FACTOR": "1", "STALLWATCH_MIN_INSYNC_REPLICAS": "1"}
    done = subprocess.run([sys.executable, "-m", "stallwatch.cli.main", "tenants", "add", *names],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


async def writes(settings: Settings, topic: str) -> bool:
    """Whether the broker takes a record from these settings' principal on `topic`."""
    producer = AIOKafkaProducer(**{**aiokafka_options(settings), "request_timeout_ms": 10_000})
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", key=b"run", partition=0)
        return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        await producer.stop()


async def reads(settings: Settings, topic: str, wait_s: float = 3.0) -> bool:
    """Whether these settings' principal can fetch the administrator's marker record (`mark`)
    from `topic`: a fetch the broker refuses returns nothing (aiokafka logs it and goes on)."""
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **aiokafka_options(settings))
    await consumer.start()
    try:
        if topic not in await consumer.topics():
            return False  # not even described to this principal
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if (await consumer.getmany(tp, timeout_ms=500)).get(tp):
                return True
        return False
    except TopicAuthorizationFailedError:
        return False
    finally:
        await consumer.stop()


async def mark(admin: Settings, topics: list[str]) -> None:
    """One record on partition 0 of each topic, written by the administrator."""
    producer = AIOKafkaProducer(**aiokafka_options(admin))
    await producer.start()
    try:
        for topic in topics:
            await producer.send_and_wait(topic, b"{}", key=b"marker", partition=0)
    finally:
        await producer.stop()


@pytest.fixture
async def tenants(secure_broker: SecureBroker, prefix: str) -> tuple[Settings, Settings, Settings]:
    """acme (principal tenant-a) and globex (tenant-b) with their ACLs, and the shared topics."""
    admin = secure_broker.settings("admin", prefix)
    await ensure_topics(admin)
    add_tenants(secure_broker, prefix, "acme", "globex")
    secure_broker.acls(prefix, "tenant", "acme", "User:tenant-a", "User:stallwatch-fleet")
    secure_broker.acls(prefix, "tenant", "globex", "User:tenant-b", "User:stallwatch-fleet")
    return (secure_broker.settings("tenant-a", prefix, tenant="acme"),
            secure_broker.settings("tenant-b", prefix, tenant="globex"), admin)


async def test_a_tenant_writes_only_its_events_and_reads_only_its_commands(tenants):
    acme, globex, admin = tenants
    await mark(admin, [acme.commands_topic, acme.deadletter_topic, acme.events_topic, acme.changelog_topic,
                       globex.commands_topic, globex.deadletter_topic, admin.commands_topic,
                       admin.tallies_topic])
    assert await writes(acme, acme.events_topic)
    assert await reads(acme, acme.commands_topic)
    assert await reads(acme, acme.deadletter_topic)
    # Another tenant's topics, the shared topics and the stream jobs' own: refused by the broker.
    for topic in (globex.events_topic, admin.events_topic, admin.tallies_topic, acme.commands_topic,
                  acme.changelog_topic):
        assert not await writes(acme, topic), topic
    for topic in (globex.commands_topic, globex.deadletter_topic, admin.commands_topic,
                  admin.tallies_topic, acme.changelog_topic, acme.events_topic):
        assert not await reads(acme, topic), topic
    assert await writes(globex, globex.events_topic) and not await writes(globex, acme.events_topic)


def test_the_grants_are_least_privilege_and_printed_as_applied(secure_broker, prefix):
    """What acls.sh grants a tenant: its three topics, literal names, nothing prefixed."""
    printed = subprocess.run([str(ROOT / "deploy/kafka/acls.sh"), "--print", "tenant", "acme", "User:t"],
                             env={**os.environ, "STALLWATCH_TOPIC_PREFIX": prefix}, text=True,
                             capture_output=True, check=True).stdout.split("\n")
    grants = {tuple(line.split()) for line in printed if line}
    allowed = {"events": ("Write", "Describe"), "commands": ("Read", "Describe"),
               "deadletter": ("Read", "Describe")}
    assert grants == {("User:t", "topic", f"{prefix}.tenant.acme.{topic}", "literal", op)
                      for topic, ops in allowed.items() for op in ops}
