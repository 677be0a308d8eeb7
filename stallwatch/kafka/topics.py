"""Create the events, commands, dead-letter, changelog and fleet topics when missing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError

from stallwatch.kafka.aiokafka_patch import AdminClient
from stallwatch.kafka.options import aiokafka_options
from stallwatch.settings import TENANT_NAME, Settings, SetupError, tenant_of_events_topic

log = logging.getLogger(__name__)

# A dead letter carries at most a bounded slice of the raw event; the topic still takes up to
# 8 MiB, so that an older worker's larger letters are never refused by the broker.
DEADLETTER_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# The tallies and the fleet app's partials are a feed, not state: an hour covers a fleet app
# down for far longer than a restart, and an unbounded feed would fill the disk.
FEED_RETENTION_MS = 3600 * 1000

# Kafka's error codes for a topic the cluster refuses, and what to change for each: a first-time
# user otherwise sees only `[('stallwatch.events', 38), ...]`.
TOPIC_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR = 36, 37, 38
# How long ensure_topics waits for new topics to have a leader on every partition: created is not
# yet usable, and a client that looked at once (the demo's, on a cold broker) reported them
# missing. Past it, the callers' own retries take over.
LEADERS_WAIT_S = 30.0
INVALID_CONFIG, TOPIC_AUTHORIZATION_FAILED, POLICY_VIOLATION = 40, 29, 44
# How long ensure_topics retries a broker that answers but names no broker ready: a KRaft broker
# back from a pause or a restart is fenced until its next heartbeat, and its metadata lists no
# broker meanwhile (aiokafka then raises NodeNotReadyError, node id None). A worker started in
# that moment crashed with that error; past this wait, a SetupError says what was seen.
BROKER_READY_WAIT_S = 30.0
# How often it asks again meanwhile: the window is usually well under a second.
BROKER_READY_POLL_S = 0.2
# After this long, one INFO line says what it waits for: start-up is otherwise silent meanwhile.
BROKER_READY_SAY_S = 3.0

T = TypeVar("T")


def wanted_topics(settings: Settings) -> list[NewTopic]:
    """Every topic with the same partition count: a run's events, commands, dead letters and
    state share a partition number, which is what lets one transaction cover them and a client
    read only its own runs' partitions."""
    durable = {"min.insync.replicas": str(settings.min_insync_replicas)}
    partitions, replicas = settings.partitions, settings.replication_factor
    return [
        # The broker stamps each event on append: expiry reads that time, never a producer's
        # clock (a runtime hours off would otherwise expire live runs, its own or others').
        NewTopic(
            settings.events_topic,
            partitions,
            replicas,
            topic_configs={**durable, "message.timestamp.type": "LogAppendTime"},
        ),
        NewTopic(settings.commands_topic, partitions, replicas, topic_configs=durable),
        NewTopic(
            settings.deadletter_topic,
            partitions,
            replicas,
            topic_configs={**durable, "max.message.bytes": str(DEADLETTER_MAX_MESSAGE_BYTES)},
        ),
        # Compacted only: retention must never delete a run's latest state. Short segments and an
        # eager cleaner keep it near one record per run, so a recovering worker reads little more
        # than the live states.
        NewTopic(
            settings.changelog_topic,
            partitions,
            replicas,
            topic_configs={
                **durable,
                "cleanup.policy": "compact",
                "segment.ms": "600000",
                "min.cleanable.dirty.ratio": "0.1",
            },
        ),
        # One partition: a record per partition of every tenant, written at takeovers.
        NewTopic(
            settings.attempts_topic,
            1,
            replicas,
            topic_configs={**durable, "cleanup.policy": "compact", "segment.ms": "600000"},
        ),
        *fleet_topics(settings),
    ]


def fleet_app_topics(settings: Settings) -> list[NewTopic]:
    """What the fleet app reads and writes of the project's topics: the fleet's own, the shared
    events topic (advisories of one-team deployments) and the dead letters."""
    written = {settings.events_topic, settings.deadletter_topic}
    return [t for t in wanted_topics(settings) if t.name in written] + fleet_topics(settings)


def fleet_topics(settings: Settings) -> list[NewTopic]:
    """The fleet topics: the worker's tallies, the fleet app's re-keyed partials and its incidents."""
    durable = {"min.insync.replicas": str(settings.min_insync_replicas)}
    feed = {**durable, "cleanup.policy": "delete", "retention.ms": str(FEED_RETENTION_MS)}
    partitions, replicas = settings.partitions, settings.replication_factor
    return [
        NewTopic(settings.tallies_topic, partitions, replicas, topic_configs=feed),
        NewTopic(settings.fleet_partials_topic, partitions, replicas, topic_configs=feed),
        # Compacted: the latest record of each incident is its state; never deleted by age.
        NewTopic(
            settings.incidents_topic,
            partitions,
            replicas,
            topic_configs={
                **durable,
                "cleanup.policy": "compact",
                "segment.ms": "600000",
                "min.cleanable.dirty.ratio": "0.1",
            },
        ),
    ]


@contextlib.contextmanager
def quiet_kafka_log() -> Iterator[None]:
    """aiokafka's complaints held back while a client connects, for a caller that says what
    failed itself (one line, not aiokafka's line before it)."""
    kafka_log = logging.getLogger("aiokafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        kafka_log.setLevel(level)


def no_broker(settings: Settings) -> SetupError:
    """What a command says when no broker answers at its bootstrap address; or, when one accepts
    the connection all the same, that it speaks another protocol than the one set (SASL against
    a plaintext listener, plaintext against TLS: the client sees the same failure)."""
    listening = _accepting(settings.bootstrap)
    if listening is not None:
        return SetupError(
            f"something listens at {listening} but does not answer as a Kafka broker over "
            f"STALLWATCH_SECURITY_PROTOCOL={settings.security_protocol}: set it to the protocol of "
            "that listener (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL), or STALLWATCH_BOOTSTRAP "
            "to the listener of your protocol"
        )
    return SetupError(
        f"no Kafka broker answers at {settings.bootstrap}: set STALLWATCH_BOOTSTRAP "
        "to your brokers (host:port, comma-separated), or start the local one "
        "with `make kafka-up`"
    )


def _accepting(bootstrap: str) -> str | None:
    """The first bootstrap address that accepts a TCP connection (None: none does)."""
    for broker in bootstrap.split(","):
        host, _, port = broker.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
                return broker.strip()
        except (OSError, ValueError):
            continue
    return None


def no_topic(settings: Settings, topic: str) -> SetupError:
    """What a reader of the project's topics says when one does not exist (yet)."""
    return SetupError(
        f"there is no topic {topic} on {settings.bootstrap}: start a worker (it creates the "
        "topics), or set STALLWATCH_TOPIC_PREFIX to the workers' prefix"
    )


async def ensure_topics(
    settings: Settings, extra: Sequence[NewTopic] = (), only: Sequence[NewTopic] | None = None
) -> None:
    """Create the missing topics (the project's, and `extra`; or `only` these: a principal allowed
    to see only the topics it uses takes every other for missing); existing ones are left as they
    are. A refusal raises SetupError naming the setting to change."""
    admin = AdminClient(**aiokafka_options(settings))
    try:
        with quiet_kafka_log():  # its failure is said below, in one line
            await admin.start()
    except KafkaConnectionError:
        await admin.close()
        raise no_broker(settings) from None
    try:
        existing = set(await until_ready(settings, admin.list_topics))
        wanted = [*wanted_topics(settings), *extra] if only is None else list(only)
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            response = await until_ready(settings, lambda: admin.create_topics(missing))
            # TOPIC_EXISTS: another worker starting at the same moment created it first.
            errors: dict[int, list[str]] = {
                code: [] for _, code, *_ in response.topic_errors if code not in (0, TOPIC_EXISTS)
            }
            for name, code, *_ in response.topic_errors:
                if code in errors:
                    errors[code].append(name)
            if errors:
                brokers = len((await until_ready(settings, admin.describe_cluster)).get("brokers", []))
                raise SetupError(refusal(settings, errors, brokers))
            log.info("created topics %s", [t.name for t in missing])
            await _until_led(settings, admin, [t.name for t in missing])
    finally:
        await admin.close()


async def list_topic_names(settings: Settings) -> list[str]:
    """Every topic of the cluster, by a short-lived admin client."""
    admin = AdminClient(**aiokafka_options(settings))
    try:
        await admin.start()
        return await admin.list_topics()
    finally:
        await admin.close()


def tenants_in(settings: Settings, topics: Iterable[str]) -> set[str]:
    """The tenants whose events topic is among `topics`."""
    return {
        tenant
        for topic in topics
        if (tenant := tenant_of_events_topic(settings.topic_prefix, topic)) is not None
    }


def add_tenants(settings: Settings, tenants: Sequence[str]) -> int:
    """`stallwatch tenants add`: each tenant's events, commands, dead-letter and changelog
    topics, created when missing. Its ACLs are the operator's (deploy/kafka/acls.sh)."""
    each = [settings.for_tenant(name) for name in tenants]
    for tenant_settings in each:
        if tenant_settings.tenant is None or not re.fullmatch(TENANT_NAME, tenant_settings.tenant):
            raise SetupError(
                f"tenant name {tenant_settings.tenant!r}: use letters, digits, _ and -, 64 characters at most"
            )

    async def create() -> None:
        for tenant_settings in each:
            await ensure_topics(tenant_settings)
            print(
                f"tenant {tenant_settings.tenant}: events on {tenant_settings.events_topic}, "
                f"commands on {tenant_settings.commands_topic}"
            )

    asyncio.run(create())
    return 0


async def until_ready(
    settings: Settings, call: Callable[[], Awaitable[T]], wait_s: float = BROKER_READY_WAIT_S
) -> T:
    """`call`'s answer, asked again while the cluster has no broker ready to take it (see
    BROKER_READY_WAIT_S): aiokafka's NodeNotReadyError only, any other error at once. A
    SetupError naming the address and the likely cause once `wait_s` passed."""
    began = time.monotonic()
    said = False
    while True:
        try:
            return await call()
        except NodeNotReadyError as exc:
            waited = time.monotonic() - began
            if waited >= wait_s:
                raise SetupError(_not_ready(settings, exc, wait_s)) from None
            if waited >= BROKER_READY_SAY_S and not said:
                said = True  # one line: start-up is otherwise silent for up to wait_s (INFO:
                # a broker starting beside the worker is no fault; the SetupError is the loud one)
                log.info(
                    "the Kafka cluster at %s has no broker ready yet (%s); asking again for up to %.0f s",
                    settings.bootstrap,
                    exc,
                    wait_s,
                )
            await asyncio.sleep(BROKER_READY_POLL_S)


def _not_ready(settings: Settings, exc: NodeNotReadyError, wait_s: float) -> str:
    """What a broker that never became ready most likely means, by what aiokafka said."""
    if "node id None" in str(exc):  # the metadata listed no broker at all
        cause = (
            "it lists no broker: a broker still starting, or fenced by its controller; "
            "check the brokers' logs"
        )
    else:  # a broker is listed, but its advertised address does not answer
        cause = (
            "its brokers' advertised addresses do not answer: check their "
            "advertised.listeners, and STALLWATCH_SECURITY_PROTOCOL and the SASL/TLS settings"
        )
    return (
        f"the Kafka cluster at {settings.bootstrap} answered, but no broker was ready for "
        f"{wait_s:.0f} s ({exc}): {cause}"
    )


async def _until_led(settings: Settings, admin: AIOKafkaAdminClient, names: list[str]) -> None:
    """Until every partition of the topics has a leader (or LEADERS_WAIT_S passed)."""
    deadline = time.monotonic() + LEADERS_WAIT_S
    while time.monotonic() < deadline:
        try:
            topics = await until_ready(
                settings, lambda: admin.describe_topics(names), wait_s=max(0.0, deadline - time.monotonic())
            )
        except SetupError:
            break  # created already: the callers' own retries take over, as below
        if all(
            t["error_code"] == 0
            and t["partitions"]
            and all(p["error_code"] == 0 and p["leader"] >= 0 for p in t["partitions"])
            for t in topics
        ):
            return
        await asyncio.sleep(0.1)
    log.warning("topics %s created but not all led after %.0f s", names, LEADERS_WAIT_S)


def refusal(settings: Settings, errors: dict[int, list[str]], brokers: int) -> str:
    """What the cluster refused and which setting to change."""
    said = []
    for code, names in errors.items():
        too_few = code == INVALID_CONFIG and brokers < settings.min_insync_replicas
        if code == INVALID_REPLICATION_FACTOR or too_few:
            said.append(
                f"the cluster has {brokers} broker{'s' if brokers != 1 else ''} and cannot hold "
                f"STALLWATCH_REPLICATION_FACTOR={settings.replication_factor} replicas (the "
                f"default, 3, is for a 3-broker cluster): set STALLWATCH_REPLICATION_FACTOR and "
                f"STALLWATCH_MIN_INSYNC_REPLICAS to at most {max(brokers, 1)} (1 and 1 for a single "
                f"local broker, as `make` does)"
            )
        elif code == INVALID_PARTITIONS:
            said.append(f"STALLWATCH_PARTITIONS={settings.partitions} is refused by the cluster")
        elif code == INVALID_CONFIG:
            said.append(
                f"a topic setting is refused (STALLWATCH_MIN_INSYNC_REPLICAS="
                f"{settings.min_insync_replicas}, or the broker's message.max.bytes is "
                f"under {DEADLETTER_MAX_MESSAGE_BYTES})"
            )
        elif code in (TOPIC_AUTHORIZATION_FAILED, POLICY_VIOLATION):
            said.append(
                "this principal may not create topics: create them as an administrator "
                "(docs/operations.md lists them), or check STALLWATCH_SASL_USERNAME"
            )
        else:
            said.append(f"Kafka error {code}")
        said[-1] = f"{', '.join(names)}: {said[-1]}"
    return "could not create the topics: " + "; ".join(said)
