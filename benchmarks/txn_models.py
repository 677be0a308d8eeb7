"""Two transaction models for many tenants, side by side: bare transactional echoes, no engine.

- `per-partition` (the worker's model today): per tenant a consumer group, and per input
  partition a transactional producer (aiokafka); each fetched batch of a partition is its own
  transaction with its offset, fenced by the partition's transactional id.
- `kip447` (the model docs/tenants.md chooses next): one consumer in one group subscribed to every
  tenant's topic and one transactional producer (confluent-kafka), committing every partition's
  outputs and offsets in one transaction every 100 ms with the group's metadata (KIP-447).

Light traffic spread over every tenant's partitions, as many small runtimes make it. Printed per
model and tenant count: the echo's CPU per message, its Kafka clients and open sockets, how long
it took to serve every partition, and whether every message came out exactly once.

    python benchmarks/txn_models.py --tenants 10 100 --partitions 2 --rate 200 --seconds 15
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kafka_bench import cpu_seconds, open_sockets
from stallwatch.kafka import aiokafka_patch

BOOTSTRAP = os.environ.get("STALLWATCH_BOOTSTRAP", "127.0.0.1:9092")
COMMIT_INTERVAL_S = 0.1


def topics_of(prefix: str, tenants: int) -> list[tuple[str, str]]:
    return [(f"{prefix}.tenant.t{n}.events", f"{prefix}.tenant.t{n}.out") for n in range(tenants)]


# -- the echoes, each in a process of its own ------------------------------------------------


async def per_partition_echo(prefix: str, tenants: int, partitions: int) -> None:
    """aiokafka: a group per tenant, a transactional producer per input partition."""
    consumers, producers = [], {}
    for n, (events, out) in enumerate(topics_of(prefix, tenants)):
        consumer = aiokafka_patch.Consumer(
            events,
            bootstrap_servers=BOOTSTRAP,
            group_id=f"{prefix}-g{n}",
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        consumers.append((consumer, out, f"{prefix}-g{n}"))
        for p in range(partitions):
            producer = AIOKafkaProducer(
                bootstrap_servers=BOOTSTRAP, transactional_id=f"{prefix}-{events}-{p}"
            )
            producers[(events, p)] = producer
    await asyncio.gather(*(producer.start() for producer in producers.values()))
    await asyncio.gather(*(consumer.start() for consumer, _, _ in consumers))
    while sum(len(c.assignment()) for c, _, _ in consumers) < tenants * partitions:
        await asyncio.sleep(0.05)
    print("ready", flush=True)

    async def serve(consumer: AIOKafkaConsumer, out: str, group: str) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            for tp, records in batches.items():
                producer = producers[(tp.topic, tp.partition)]
                async with producer.transaction():
                    for record in records:
                        await producer.send(out, record.value, partition=tp.partition)
                    await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, group)

    await asyncio.gather(*(serve(*c) for c in consumers))


def kip447_echo(prefix: str, tenants: int, partitions: int) -> None:
    """confluent-kafka: one group over every tenant's topic, one producer, a transaction per 100 ms."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as Tp

    pairs = dict(topics_of(prefix, tenants))
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"{prefix}-all",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    producer = Producer(
        {"bootstrap.servers": BOOTSTRAP, "transactional.id": f"{prefix}-worker-1", "linger.ms": 0}
    )
    producer.init_transactions()
    consumer.subscribe(list(pairs))
    while len(consumer.assignment()) < tenants * partitions:
        consumer.poll(0.05)
    print("ready", flush=True)
    producer.begin_transaction()
    offsets: dict[tuple[str, int], int] = {}
    began = time.monotonic()
    while True:
        for message in consumer.consume(500, 0.02):
            if message.error():
                continue
            producer.produce(pairs[message.topic()], message.value(), partition=message.partition())
            offsets[(message.topic(), message.partition())] = message.offset() + 1
        producer.poll(0)
        if offsets and time.monotonic() - began >= COMMIT_INTERVAL_S:
            positions = [Tp(topic, partition, offset) for (topic, partition), offset in offsets.items()]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            producer.commit_transaction()
            producer.begin_transaction()
            offsets, began = {}, time.monotonic()


# -- the driver ----------------------------------------------------------------------------


async def create(prefix: str, tenants: int, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        names = [name for pair in topics_of(prefix, tenants) for name in pair]
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def drive(prefix: str, tenants: int, partitions: int, rate: int, seconds: float) -> int:
    """Light traffic round robin over every tenant's partitions; returns the messages sent."""
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, linger_ms=0)
    await producer.start()
    targets = [(events, p) for events, _ in topics_of(prefix, tenants) for p in range(partitions)]
    sent = 0
    try:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            events, p = targets[sent % len(targets)]
            await producer.send(events, f"m{sent}".encode(), partition=p)
            sent += 1
            await asyncio.sleep(max(0.0, began + sent / rate - time.monotonic()))
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def received(prefix: str, tenants: int, until: int, timeout_s: float) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        *[out for _, out in topics_of(prefix, tenants)],
        bootstrap_servers=BOOTSTRAP,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(got) < until and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(r.value for r in records)
    finally:
        await consumer.stop()
    return got


async def measure(model: str, tenants: int, partitions: int, rate: int, seconds: float) -> dict:
    prefix = f"txn{uuid.uuid4().hex[:8]}"
    await create(prefix, tenants, partitions)
    started = time.monotonic()
    echo = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--echo",
            model,
            "--prefix",
            prefix,
            "--tenants",
            str(tenants),
            "--partitions",
            str(partitions),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert echo.stdout is not None
        line = await asyncio.to_thread(echo.stdout.readline)
        assert line.strip() == "ready", line
        ready_s = time.monotonic() - started
        cpu_before = cpu_seconds(echo.pid)
        sent = await drive(prefix, tenants, partitions, rate, seconds)
        got = await received(prefix, tenants, sent, 60)
        cpu = cpu_seconds(echo.pid) - cpu_before
        sockets = open_sockets(echo.pid)
    finally:
        echo.kill()
        echo.wait()
    return {
        "ready_s": ready_s,
        "cpu_us": cpu / max(1, sent) * 1e6,
        "sockets": sockets,
        "clients": tenants * (partitions + 1) if model == "per-partition" else 2,
        "exactly_once": sorted(got) == sorted(f"m{n}".encode() for n in range(sent)),
        "sent": sent,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--echo", choices=["per-partition", "kip447"])
    parser.add_argument("--prefix")
    parser.add_argument("--tenants", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200, help="messages a second over all tenants")
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    if args.echo == "per-partition":
        asyncio.run(per_partition_echo(args.prefix, args.tenants[0], args.partitions))
        return
    if args.echo == "kip447":
        kip447_echo(args.prefix, args.tenants[0], args.partitions)
        return
    spread = f"every tenant's {args.partitions} partitions"
    print(f"{args.rate} messages/s spread over {spread} for {args.seconds:g} s")
    print("model          tenants  ready    CPU/message  clients  sockets  exactly once")
    for tenants in args.tenants:
        for model in ("per-partition", "kip447"):
            r = asyncio.run(measure(model, tenants, args.partitions, args.rate, args.seconds))
            print(
                f"{model:<14} {tenants:>7}  {r['ready_s']:5.1f} s  {r['cpu_us']:8.0f} µs  {r['clients']:>7}  "
                f"{r['sockets']:>7}  {r['exactly_once']} ({r['sent']} messages)"
            )


if __name__ == "__main__":
    main()
