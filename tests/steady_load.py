"""A steady load of short runs for fault tests and benchmarks, each partition's sent on its own,
and readers that note when each record reaches them: the longest gap in a partition's records is
how long its verdicts stopped."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

from aiokafka.errors import KafkaTimeoutError
from aiokafka.partitioner import murmur2

from stallwatch.kafka.aiokafka_patch import Consumer, Producer
from stallwatch.kafka.options import failover_options
from stallwatch.settings import Settings
from tests.script import RunScript


def partition_of(run_id: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a run's key."""
    return (murmur2(run_id.encode()) & 0x7FFFFFFF) % partitions


def run_ids(prefix: str, partition: int, partitions: int) -> Iterator[str]:
    """Run ids whose key the default partitioner sends to `partition`."""
    return (
        run
        for n in itertools.count()
        if partition_of(run := f"{prefix}{partition}-{n}", partitions) == partition
    )


def run_lines(run_id: str) -> list[bytes]:
    """One short run: its start, two rounds with a call each, its end."""
    s = RunScript(run_id, ts=time.time())
    s.round_of(("search", {"q": run_id}, {"docs": [run_id]}))
    s.round_of(("search", {"q": run_id}, {"docs": [run_id]}))
    s.end()
    return s.lines()


async def load(settings: Settings, rate: float, stop: asyncio.Event, prefix: str = "r") -> int:
    """`rate` events a second in all until `stop`, each partition's sent by a task of its own: a
    partition whose leader is away stalls its own runs only, as in a fleet of separate agents.
    Every run started is ended. Returns the number of runs sent; a send that fails is left out
    of the log (a reference replays the log as the broker holds it)."""
    producer = Producer(
        bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5, **failover_options(settings)
    )
    await producer.start()
    sent_runs = 0

    async def one_partition(partition: int) -> None:
        nonlocal sent_runs
        for run_id in run_ids(prefix, partition, settings.partitions):
            if stop.is_set():
                return
            lines = run_lines(run_id)
            for line in lines:
                while True:
                    try:
                        sent = await producer.send(
                            settings.events_topic, line, key=run_id.encode(), partition=partition
                        )
                        break
                    except KafkaTimeoutError:  # no room while the partition's leader is away
                        continue
                sent.add_done_callback(lambda done: done.exception())
            sent_runs += 1
            await asyncio.sleep(len(lines) * settings.partitions / rate)  # the thing asked for: the rate

    try:
        await asyncio.gather(*(one_partition(p) for p in range(settings.partitions)))
        await producer.flush()
    finally:
        await producer.stop()
    return sent_runs


async def arrivals(
    settings: Settings, topic: str, stop: asyncio.Event, into: dict[int, list[float]], values: list[bytes]
) -> None:
    """Until `stop`: when (monotonic) each record of `topic` reaches a read-committed reader
    with the clients' options, per partition, and the records' values."""
    consumer = Consumer(
        topic,
        bootstrap_servers=settings.bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        **failover_options(settings),
    )
    await consumer.start()
    try:
        while not stop.is_set():
            for tp, records in (await consumer.getmany(timeout_ms=100)).items():
                now = time.monotonic()
                into[tp.partition].extend([now] * len(records))
                values.extend(r.value for r in records)
    finally:
        await consumer.stop()


def longest_gaps(
    times: dict[int, list[float]], partitions: int, start: float, end: float
) -> dict[int, float]:
    """Per partition, the longest time without a record between `start` and `end`."""
    gaps = {}
    for partition in range(partitions):
        seen = sorted(t for t in times.get(partition, []) if start <= t <= end)
        points = [start, *seen, end]
        gaps[partition] = max(b - a for a, b in itertools.pairwise(points))
    return gaps
