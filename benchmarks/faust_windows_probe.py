"""Faust's hopping windowed table against a plain table: updates/s and changelog records per update.

    python benchmarks/faust_windows_probe.py hopping|plain [UPDATES]

One Faust worker counts UPDATES records over 50 keys into a table (`hopping`: 300 s windows,
60 s step, as the fleet app's defaults; `plain`: one value per key), then prints the rate and
the records its changelog holds. What docs/decisions.md (the fleet app) cites for not using
Faust's windowed tables.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from datetime import timedelta

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

BOOTSTRAP = os.environ.get("STALLWATCH_BOOTSTRAP", "127.0.0.1:9092")
KIND = sys.argv[1] if len(sys.argv) > 1 else "hopping"
UPDATES = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
PREFIX = f"probe{uuid.uuid4().hex[:6]}"
SOURCE = f"{PREFIX}-src"

app = faust.App(
    PREFIX,
    broker=f"kafka://{BOOTSTRAP}",
    store="memory://",
    topic_partitions=1,
    topic_replication_factor=1,
    table_standby_replicas=0,
    web_enabled=False,
)
source = app.topic(
    SOURCE, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw", partitions=1
)
table = app.Table("t", default=int, partitions=1)
if KIND == "hopping":
    table = table.hopping(timedelta(seconds=300), timedelta(seconds=60), expires=timedelta(seconds=600))
done = asyncio.Event()
progress = {"count": 0, "start": 0.0}


@app.agent(source)
async def count(stream: faust.StreamT) -> None:
    async for key, _ in stream.items():
        if progress["count"] == 0:
            progress["start"] = time.perf_counter()
        table[key] += 1
        progress["count"] += 1
        if progress["count"] == UPDATES:
            elapsed = time.perf_counter() - progress["start"]
            print(f"{KIND}: {UPDATES} updates in {elapsed:.2f} s ({UPDATES / elapsed:,.0f}/s)", flush=True)
            done.set()


@app.task
async def drive() -> None:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP)
    await producer.start()
    for i in range(UPDATES):
        await producer.send(SOURCE, b"x", key=f"k{i % 50}".encode())
    await producer.flush()
    await producer.stop()
    await done.wait()
    await asyncio.sleep(3)  # the changelog's last writes
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP)
    await consumer.start()
    tp = TopicPartition(f"{PREFIX}-t-changelog", 0)
    end = (await consumer.end_offsets([tp]))[tp]
    await consumer.stop()
    print(
        f"{KIND}: {end} changelog records for {UPDATES} updates ({end / UPDATES:.1f} per update)", flush=True
    )
    os._exit(0)


async def create_source() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(SOURCE, 1, 1)])
    finally:
        await admin.close()


if __name__ == "__main__":
    asyncio.run(create_source())
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()
