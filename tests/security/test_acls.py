"""The ACLs as shipped (deploy/kafka/acls.sh), on a broker with SASL and authorization on: a
tenant's principal writes only its events and reads only its commands and dead letters, a
one-team runtime's only the shared events and commands; the broker refuses the rest, whatever
they write in their events, and only the administrator changes the ACLs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.security.conftest import KAFKA_LIBS, ROOT, SecureBroker, new_prefix

# The secure broker is started and stopped by these tests: one xdist worker runs them all.
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("secure-broker")]


def add_tenants(broker: SecureBroker, prefix: str, *names: str) -> None:
    """`stallwatch tenants add` as the administrator."""
    env = {
        **os.environ,
        **broker.env("admin"),
        "STALLWATCH_BOOTSTRAP": broker.bootstrap,
        "STALLWATCH_TOPIC_PREFIX": prefix,
        "STALLWATCH_PARTITIONS": "2",
        "STALLWATCH_REPLICATION_FACTOR": "1",
        "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "tenants", "add", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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


@pytest.fixture(scope="module")
async def tenants(secure_broker: SecureBroker) -> tuple[Settings, Settings, Settings]:
    """acme (principal tenant-a) and globex (tenant-b) with their ACLs, and the shared topics,
    once for the module (provisioning takes seconds): the tests add records and the team's
    grants, on which no other test's refusals depend."""
    prefix = new_prefix()
    admin = secure_broker.settings("admin", prefix)
    await ensure_topics(admin)
    add_tenants(secure_broker, prefix, "acme", "globex")
    secure_broker.acls(prefix, "tenant", "acme", "User:tenant-a", "User:stallwatch-fleet")
    secure_broker.acls(prefix, "tenant", "globex", "User:tenant-b", "User:stallwatch-fleet")
    return (
        secure_broker.settings("tenant-a", prefix, tenant="acme"),
        secure_broker.settings("tenant-b", prefix, tenant="globex"),
        admin,
    )


async def test_a_tenant_writes_only_its_events_and_reads_only_its_commands(tenants):
    acme, globex, admin = tenants
    await mark(
        admin,
        [
            acme.commands_topic,
            acme.deadletter_topic,
            acme.events_topic,
            acme.changelog_topic,
            globex.commands_topic,
            globex.deadletter_topic,
            admin.commands_topic,
            admin.tallies_topic,
        ],
    )
    assert await writes(acme, acme.events_topic)
    assert await reads(acme, acme.commands_topic)
    assert await reads(acme, acme.deadletter_topic)
    # Another tenant's topics, the shared topics and the stream jobs' own: refused by the broker.
    for topic in (
        globex.events_topic,
        admin.events_topic,
        admin.tallies_topic,
        acme.commands_topic,
        acme.changelog_topic,
    ):
        assert not await writes(acme, topic), topic
    for topic in (
        globex.commands_topic,
        globex.deadletter_topic,
        admin.commands_topic,
        admin.tallies_topic,
        acme.changelog_topic,
        acme.events_topic,
    ):
        assert not await reads(acme, topic), topic
    assert await writes(globex, globex.events_topic) and not await writes(globex, acme.events_topic)


def test_the_grants_are_least_privilege_and_printed_as_applied(secure_broker, prefix):
    """What acls.sh grants a tenant: its three topics, literal names, nothing prefixed; and its
    principal's quotas."""
    printed = subprocess.run(
        [str(ROOT / "deploy/kafka/acls.sh"), "--print", "tenant", "acme", "User:t"],
        env={**os.environ, "STALLWATCH_TOPIC_PREFIX": prefix},
        text=True,
        capture_output=True,
        check=True,
    ).stdout.split("\n")
    quotas = {tuple(line.split()) for line in printed if " quota " in line}
    grants = {tuple(line.split()) for line in printed if line and " quota " not in line}
    assert {q[2] for q in quotas} == {"producer_byte_rate", "consumer_byte_rate", "request_percentage"}
    assert {q[0] for q in quotas} == {"User:t"}
    allowed = {
        "events": ("Write", "Describe"),
        "commands": ("Read", "Describe"),
        "deadletter": ("Read", "Describe"),
    }
    assert grants == {
        ("User:t", "topic", f"{prefix}.tenant.acme.{topic}", "literal", op)
        for topic, ops in allowed.items()
        for op in ops
    }


async def test_a_team_writes_only_the_shared_events_and_reads_only_the_shared_commands(
    secure_broker, tenants
):
    acme, _, admin = tenants
    secure_broker.acls(admin.topic_prefix, "team", "User:team")
    team = secure_broker.settings("team", admin.topic_prefix)
    await mark(
        admin, [admin.commands_topic, admin.deadletter_topic, admin.tallies_topic, acme.commands_topic]
    )
    assert await writes(team, team.events_topic)
    assert await reads(team, team.commands_topic)
    for topic in (acme.events_topic, admin.commands_topic, admin.tallies_topic):
        assert not await writes(team, topic), topic
    # The shared dead letters too: the fleet app's there name any tenant and its tools.
    for topic in (acme.commands_topic, admin.deadletter_topic, admin.tallies_topic, admin.events_topic):
        assert not await reads(team, topic), topic


def acl_command(broker: SecureBroker, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Kafka's own AclCommand on the controller listener, as the client `config` describes."""
    return subprocess.run(
        [
            "java",
            "-XX:TieredStopAtLevel=1",
            "-Dlog4j2.level=WARN",
            "-cp",
            f"{KAFKA_LIBS}/*",
            "org.apache.kafka.tools.AclCommand",
            "--bootstrap-controller",
            broker.controller,
            "--command-config",
            str(config),
            *args,
        ],
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )


async def test_the_controller_listener_changes_no_acl_for_anyone_but_the_administrator(
    secure_broker, tenants, tmp_path
):
    """A controller answers CreateAcls (`--bootstrap-controller`): unauthenticated there, any
    local process could grant itself everything."""
    acme, _, admin = tenants
    quick = "default.api.timeout.ms=6000\nrequest.timeout.ms=3000\n"
    anonymous = tmp_path / "anonymous.properties"
    anonymous.write_text(quick)
    tenant = tmp_path / "tenant-a.properties"
    tenant.write_text(
        quick + "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required username="tenant-a" password="{secure_broker.passwords["tenant-a"]}";\n'
    )
    grant = (
        "--add",
        "--allow-principal",
        "User:tenant-a",
        "--operation",
        "Write",
        "--topic",
        admin.events_topic,
    )
    for config in (anonymous, tenant):
        assert acl_command(secure_broker, config, *grant).returncode != 0, config.name
    assert not await writes(acme, admin.events_topic)
    # The same command reaches the controller with the administrator's settings.
    listed = acl_command(secure_broker, secure_broker.data / "admin.properties", "--list")
    assert listed.returncode == 0, listed.stderr[-2000:]


def test_the_secure_brokers_passwords_are_readable_by_its_owner_only(secure_broker):
    for name in ("server.properties", "passwords", "admin.properties"):
        assert (secure_broker.data / name).stat().st_mode & 0o077 == 0, name
