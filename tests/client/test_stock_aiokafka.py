"""The light client's process keeps a stock aiokafka: an agent runtime that uses aiokafka for its own
work gets aiokafka's own classes, methods and module state, whatever the client built and started.
The project's changes act on the project's objects only (stallwatch/kafka/aiokafka_patch.py)."""

from __future__ import annotations

import inspect
import random
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.client
import aiokafka.conn
import aiokafka.consumer.consumer
import aiokafka.producer.producer
import aiokafka.producer.sender
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection

from stallwatch.client import KafkaClient
from stallwatch.kafka import aiokafka_patch
from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import fresh_settings

AIOKAFKA = Path(aiokafka.__file__).resolve().parent
# The classes of aiokafka the project's subclasses derive from or sit beside.
CLASSES = (
    AIOKafkaClient,
    AIOKafkaConnection,
    AIOKafkaProducer,
    AIOKafkaConsumer,
    AIOKafkaAdminClient,
    aiokafka.producer.sender.Sender,
    aiokafka.producer.sender.AddPartitionsToTxnHandler,
)


def foreign_members() -> list[str]:
    """Every function or property on aiokafka's classes whose code is not in aiokafka's files."""
    found = []
    for cls in CLASSES:
        for name, member in vars(cls).items():
            for function in functions_of(member):
                # functools.wraps would copy a name and module, never the code's file.
                outside = not Path(function.__code__.co_filename).resolve().is_relative_to(AIOKAFKA)
                if outside or hasattr(function, "__wrapped__"):
                    found.append(f"{cls.__name__}.{name}")
    return found


def functions_of(member: object) -> list[Any]:
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if f is not None]
    if isinstance(member, staticmethod | classmethod):
        return [member.__func__]
    return [member] if inspect.isfunction(member) else []


def module_state_changed() -> list[str]:
    expected = {
        "aiokafka.client.random": (aiokafka.client.random, random),
        "aiokafka.client.create_conn": (aiokafka.client.create_conn, aiokafka.conn.create_conn),
        "aiokafka.producer.producer.AIOKafkaClient": (
            aiokafka.producer.producer.AIOKafkaClient,
            AIOKafkaClient,
        ),
        "aiokafka.consumer.consumer.AIOKafkaClient": (
            aiokafka.consumer.consumer.AIOKafkaClient,
            AIOKafkaClient,
        ),
        "aiokafka.producer.producer.Sender": (
            aiokafka.producer.producer.Sender,
            aiokafka.producer.sender.Sender,
        ),
        "aiokafka.AIOKafkaProducer": (aiokafka.AIOKafkaProducer, aiokafka.producer.producer.AIOKafkaProducer),
        "aiokafka.AIOKafkaConsumer": (aiokafka.AIOKafkaConsumer, aiokafka.consumer.consumer.AIOKafkaConsumer),
    }
    changed = [name for name, (now, own) in expected.items() if now is not own]
    if aiokafka.producer.sender.BACKOFF_OVERRIDE != aiokafka_patch.AIOKAFKA_BACKOFF_S:
        changed.append("aiokafka.producer.sender.BACKOFF_OVERRIDE")
    return changed


@pytest.mark.kafka
async def test_a_started_kafka_client_leaves_aiokafka_stock_for_the_runtimes_own_clients():
    settings = fresh_settings(partitions=1)
    await ensure_topics(settings)
    async with KafkaClient(settings, verdict_timeout_s=30.0) as client:
        run = await client.start_run("stock-1", "chat", [{"name": "search"}])
        _, decision = await run.propose("search", {"q": "kafka"})
        await run.end("done")
        assert decision.allowed
        assert client.connected, "the client never connected: the test proves nothing"
        # Its own producer and consumer are the project's, on the project's client.
        assert type(client._producer) is aiokafka_patch.Producer
        assert type(client._producer.client) is aiokafka_patch.Client
        assert type(client._consumer) is aiokafka_patch.Consumer
        assert foreign_members() == []
        assert module_state_changed() == []
        # The runtime's own producer is aiokafka's, on aiokafka's client and sender.
        own = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
        assert type(own.client) is AIOKafkaClient
        assert type(own._sender) is aiokafka.producer.sender.Sender


def test_the_check_sees_a_replaced_method_and_a_replaced_module_global(monkeypatch):
    monkeypatch.setattr(AIOKafkaClient, "_get_conn", aiokafka_patch.Client._get_conn)
    monkeypatch.setattr(aiokafka.client, "random", object())
    assert foreign_members() == ["AIOKafkaClient._get_conn"]
    assert module_state_changed() == ["aiokafka.client.random"]
