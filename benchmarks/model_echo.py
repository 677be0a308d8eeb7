"""Bare transactional echoes of the worker's two transaction models (docs/tenants.md): the floor
that `kafka_bench.py --model` measures the worker's verdicts against.

    python benchmarks/model_echo.py partition|group BOOTSTRAP EVENTS COMMANDS CHANGELOG GROUP [GROUPS]

Both do the worker's Kafka work with no engine and no state: every message read (read committed)
is answered on COMMANDS at once by an idempotent producer outside any transaction, as the worker
publishes its commands ahead; what was read is committed in transactions that carry a position
record per partition to CHANGELOG and the input offsets, once the answers are acknowledged, at
most one every commit interval (the worker's default), and the reading goes on meanwhile.

- partition: aiokafka, a transactional producer per input partition (`{GROUP}-{EVENTS}-{p}`),
  each partition's transactions on their own (the pre-KIP-447 scheme).
- group: confluent-kafka, one consumer (cooperative-sticky) and one transactional producer, with
  the worker's librdkafka options; every partition's positions and offsets go in one
  transaction with the group's metadata (KIP-447), committed on a thread of its own. Given many
  tenants' topics (comma-separated, below), they are dealt round robin into GROUPS tenant groups
  (the worker hashes its tenants into as many; `benchmarks/tenants_bench.py`).

Runs until SIGTERM or SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.settings import Settings
from stallwatch_streams.worker.confluent.consumer import FETCH_WAIT_MAX_MS
from stallwatch_streams.worker.confluent.consumer import SESSION_TIMEOUT_MS as GROUP_SESSION_TIMEOUT_MS
from stallwatch_streams.worker.confluent.options import librdkafka_options
from stallwatch_streams.worker.confluent.transactions import (
    TRANSACTION_TIMEOUT_MS as GROUP_TRANSACTION_TIMEOUT_MS,
)
from stallwatch_streams.worker.membership import SESSION_TIMEOUT_MS
from stallwatch_streams.worker.producers import TRANSACTION_TIMEOUT_MS as PARTITION_TRANSACTION_TIMEOUT_MS

COMMIT_INTERVAL_S = Settings.model_fields["commit_interval_s"].default


async def partition_echo(bootstrap: str, events: str, commands: str, changelog: str, group: str) -> None:
    consumer = AIOKafkaConsumer(
        events,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        fetch_max_wait_ms=10,
    )
    ahead = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=0)
    await consumer.start()
    await ahead.start()
    transactional: dict[int, AIOKafkaProducer] = {}
    read_to: dict[int, int] = {}  # partition: the offset after the last record answered
    committing: dict[int, asyncio.Task[None]] = {}

    async def commit(partition: int) -> None:
        """The partition's transactions, one at a time, at least the interval apart."""
        producer = transactional.get(partition)
        if producer is None:
            producer = transactional[partition] = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id=f"{group}-{events}-{partition}",
                transaction_timeout_ms=PARTITION_TRANSACTION_TIMEOUT_MS,
                linger_ms=0,
            )
            await producer.start()
        committed = -1
        while read_to[partition] != committed:
            began = time.monotonic()
            offset = read_to[partition]
            await ahead.flush()  # the answers acknowledged before what they answer is committed
            async with producer.transaction():
                # Acknowledged before the offsets join, as the worker's are: offsets added while
                # a record is in flight make the broker refuse it now and then (KIP-890's check).
                await (
                    await producer.send(changelog, str(offset).encode(), key=f"position-{partition}".encode())
                )
                await producer.send_offsets_to_transaction({TopicPartition(events, partition): offset}, group)
            committed = offset
            await asyncio.sleep(max(0.0, began + COMMIT_INTERVAL_S - time.monotonic()))

    while True:
        batches = await consumer.getmany(timeout_ms=100, max_records=4000)
        for tp, records in batches.items():
            for record in records:
                await ahead.send(commands, record.value, key=record.key)
            read_to[tp.partition] = records[-1].offset + 1
            task = committing.get(tp.partition)
            if task is None or task.done():
                if task is not None:
                    task.result()  # a failed commit ends the echo
                committing[tp.partition] = asyncio.create_task(commit(tp.partition))


def group_echo(
    bootstrap: str, events: str, commands: str, changelog: str, group: str, groups: str = "1"
) -> None:
    """EVENTS, COMMANDS and CHANGELOG may each name several topics, comma-separated and in the
    same order (one tenant's three each): the topics are dealt round robin into GROUPS tenant
    groups, each with a consumer, a transactional producer and a committer of its own, as the
    worker keeps them; every answer goes out on the one idempotent producer."""
    from confluent_kafka import Producer

    options = librdkafka_options(Settings(bootstrap=bootstrap))
    ahead = Producer({**options, "enable.idempotence": True, "acks": "all", "linger.ms": 0})
    routes = dict(
        zip(events.split(","), zip(commands.split(","), changelog.split(","), strict=True), strict=True)
    )
    topics = list(routes)
    count = max(1, min(int(groups), len(topics)))
    echoes = [
        threading.Thread(
            target=_dying_on_failure(_group_echo),
            args=(
                options,
                ahead,
                {t: routes[t] for t in topics[n::count]},
                f"{group}-{n}" if count > 1 else group,
            ),
            daemon=True,
        )
        for n in range(count)
    ]
    for echo in echoes:
        echo.start()
    while True:
        ahead.poll(0.1)  # the answers' acknowledgements served


def _dying_on_failure(run: Callable[..., None]) -> Callable[..., None]:
    def dying(*args: object) -> None:
        try:
            run(*args)
        except BaseException:
            traceback.print_exc()
            os._exit(1)  # a failed commit ends the echo

    return dying


def _group_echo(
    options: dict[str, object], ahead: Any, routes: dict[str, tuple[str, str]], group: str
) -> None:
    """One tenant group: its consumer read on this thread, its transactions on another."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as RdTopicPartition

    consumer = Consumer(
        {
            **options,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": GROUP_SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 2000,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            "queued.max.messages.kbytes": 16384,
        }
    )
    transactional = Producer(
        {
            **options,
            "transactional.id": f"{group}-echo",
            "transaction.timeout.ms": GROUP_TRANSACTION_TIMEOUT_MS,
            "linger.ms": 2,
        }
    )
    transactional.init_transactions()
    consumer.subscribe(list(routes))
    lock = threading.Lock()
    read_to: dict[tuple[str, int], int] = {}  # the consumer's thread's, taken by the committer's
    metadata: list[object] = []

    def commit_every_interval() -> None:
        while True:
            began = time.monotonic()
            with lock:
                offsets, group_metadata = dict(read_to), metadata[-1] if metadata else None
                read_to.clear()
            if offsets and group_metadata is not None:
                ahead.flush()  # the answers acknowledged before what they answer is committed
                transactional.begin_transaction()
                for (topic, partition), offset in offsets.items():
                    transactional.produce(
                        routes[topic][1], str(offset).encode(), f"position-{partition}".encode(), partition
                    )
                transactional.send_offsets_to_transaction(
                    [RdTopicPartition(t, p, offset) for (t, p), offset in offsets.items()], group_metadata
                )
                transactional.commit_transaction()
            time.sleep(max(0.0, began + COMMIT_INTERVAL_S - time.monotonic()))

    threading.Thread(target=_dying_on_failure(commit_every_interval), daemon=True).start()
    while True:
        first = consumer.poll(0.02)
        if first is None:
            continue
        read: dict[tuple[str, int], int] = {}
        for message in [first, *consumer.consume(3999, 0)]:
            if message.error() is not None:
                continue
            topic, partition = message.topic(), message.partition()
            ahead.produce(routes[topic][0], message.value(), message.key(), partition)
            read[(topic, partition)] = message.offset() + 1
        with lock:
            read_to.update(read)
            metadata[:] = [consumer.consumer_group_metadata()]


if __name__ == "__main__":
    model, *topics = sys.argv[1:]
    if model == "partition":
        asyncio.run(partition_echo(*topics))
    else:
        group_echo(*topics)
