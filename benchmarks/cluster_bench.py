"""A broker of three fails under load: the longest gap in each partition's output, the decision
workers beside a bare aiokafka transactional echo on the same cluster, under the same fault.

    python benchmarks/cluster_bench.py [--fault kill|freeze] [--rate 700] [--down-s 25]

The cluster is deploy/kafka/cluster.sh (three KRaft nodes, replication 3, min ISR 2). Two workers
on eight partitions and the echo (a consumer group reading the same events topic, each batch
copied to its own topic in one transaction with its offsets, as the worker commits) run under a
steady load of new runs. After 15 s, the node leading the most events partitions is killed
(SIGKILL, started again `--down-s` later) or frozen (SIGSTOP for `--down-s`, then SIGCONT); the
load goes on 30 s after it is back. Printed per partition: the longest time between two
consecutive records of the worker's commands and of the echo's output during the fault, and
whether every run's commands equal a crash-free replay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.kafka_harness import WorkerProcess, by_run, replay_commands, stored_events
from tests.script import RunScript

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "deploy/kafka/cluster.sh"
PARTITIONS = 8


def cluster(*args: str) -> str:
    return subprocess.run([str(CLUSTER), *args], check=True, text=True, capture_output=True,
                          timeout=600).stdout.strip()


def run_lines(n: int) -> list[bytes]:
    """One short run: its start, two rounds with a call each, its end."""
    s = RunScript(f"r{n}", ts=time.time())
    s.round_of(("search", {"q": n}, {"docs": [n]}))
    s.round_of(("search", {"q": n}, {"docs": [n]}))
    s.end()
    return s.lines()


async def leader_of_most(settings: Settings) -> int:
    """The node id leading the most partitions of the events topic."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([settings.events_topic])
    finally:
        await admin.close()
    leaders: dict[int, int] = defaultdict(int)
    for partition in described[0]["partitions"]:
        leaders[partition["leader"]] += 1
    return max(leaders, key=lambda node: leaders[node])


async def echo(settings: Settings, output: str, stop: asyncio.Event) -> None:
    """The floor: each fetched batch copied to `output` in one transaction with its offsets; on
    any Kafka error the consumer and producer start again from the committed offsets, as a
    restarted worker would (the least any exactly-once loop must do)."""
    while not stop.is_set():
        with contextlib.suppress(KafkaError):
            await _echo_until_error(settings, output, stop)


async def _echo_until_error(settings: Settings, output: str, stop: asyncio.Event) -> None:
    group = f"{settings.topic_prefix}-echo"
    consumer = AIOKafkaConsumer(settings.events_topic, bootstrap_servers=settings.bootstrap,
                                group_id=group, enable_auto_commit=False,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap,
                                transactional_id=f"{group}-{uuid.uuid4().hex[:6]}", linger_ms=0)
    try:
        await consumer.start()
        await producer.start()
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=4000)
            if not batches:
                continue
            async with producer.transaction():
                for tp, records in batches.items():
                    for r in records:
                        await producer.send(output, r.value, key=r.key, partition=tp.partition)
                await producer.send_offsets_to_transaction(
                    {tp: records[-1].offset + 1 for tp, records in batches.items()}, group)
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
        with contextlib.suppress(Exception):
            await consumer.stop()


async def arrivals(settings: Settings, topic: str, stop: asyncio.Event,
                   into: dict[int, list[float]], values: list[bytes]) -> None:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.bootstrap,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    await consumer.start()
    try:
        while not stop.is_set():
            for tp, records in (await consumer.getmany(timeout_ms=100)).items():
                now = time.monotonic()
                into[tp.partition].extend([now] * len(records))
                values.extend(r.value for r in records)
    finally:
        await consumer.stop()


def longest_gaps(times: dict[int, list[float]], start: float, end: float) -> dict[int, float]:
    """Per partition, the longest time without a record between `start` and `end`."""
    gaps = {}
    for partition in range(PARTITIONS):
        seen = sorted(t for t in times.get(partition, []) if start <= t <= end)
        points = [start, *seen, end]
        gaps[partition] = max(b - a for a, b in itertools.pairwise(points))
    return gaps


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=["kill", "freeze"], default="kill")
    parser.add_argument("--rate", type=float, default=700.0, help="events per second")
    parser.add_argument("--down-s", type=float, default=25.0)
    args = parser.parse_args()
    cluster("up")
    settings = Settings(bootstrap=cluster("bootstrap"), topic_prefix=f"c{uuid.uuid4().hex[:8]}",
                        partitions=PARTITIONS)
    await ensure_topics(settings)
    echo_topic = f"{settings.topic_prefix}.echo"
    await ensure_topics(settings, only=[NewTopic(echo_topic, PARTITIONS, 3,
                                                 topic_configs={"min.insync.replicas": "2"})])
    env = {"STALLWATCH_REPLICATION_FACTOR": "3", "STALLWATCH_MIN_INSYNC_REPLICAS": "2"}
    workers = [WorkerProcess(settings, name, env) for name in ("a", "b")]
    stop = asyncio.Event()
    commands: dict[int, list[float]] = defaultdict(list)
    echoed: dict[int, list[float]] = defaultdict(list)
    command_values: list[bytes] = []
    tasks = [asyncio.create_task(echo(settings, echo_topic, stop)),
             asyncio.create_task(arrivals(settings, settings.commands_topic, stop, commands, command_values)),
             asyncio.create_task(arrivals(settings, echo_topic, stop, echoed, []))]
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5)
    await producer.start()
    fault_at = back_at = 0.0
    node = 0
    try:
        for worker in workers:
            await worker.ready(120)
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < 15 + args.down_s + 30:
            elapsed = time.monotonic() - started
            if not fault_at and elapsed >= 15:
                node = await leader_of_most(settings)
                cluster("kill" if args.fault == "kill" else "stop", str(node))
                fault_at = time.monotonic()
            if fault_at and not back_at and time.monotonic() - fault_at >= args.down_s:
                if args.fault == "kill":
                    await asyncio.to_thread(cluster, "start", str(node))
                else:
                    cluster("cont", str(node))
                back_at = time.monotonic()
            lines = run_lines(n)
            n += 1
            for line in lines:
                await producer.send(settings.events_topic, line, key=orjson.loads(line)["run_id"].encode())
            await asyncio.sleep(len(lines) / args.rate)
        await producer.flush()
        await asyncio.sleep(10)
    finally:
        await producer.stop()
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
        for worker in workers:
            worker.stop()
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster("cont", str(node))
    end = back_at + 20
    worker_gaps, echo_gaps = longest_gaps(commands, fault_at, end), longest_gaps(echoed, fault_at, end)
    print(f"fault: {args.fault} of node {node} for {args.down_s:.0f} s, {args.rate:.0f} events/s")
    print("partition  worker's longest gap  echo's longest gap")
    for partition in range(PARTITIONS):
        print(f"{partition:9}  {worker_gaps[partition]:19.1f}s  {echo_gaps[partition]:17.1f}s")
    print(f"{'max':>9}  {max(worker_gaps.values()):19.1f}s  {max(echo_gaps.values()):17.1f}s")
    # The log as the broker holds it: a send that timed out during the fault never reached it.
    expected = by_run(replay_commands(await stored_events(settings)))
    got = by_run(command_values)
    differing = [run for run in expected if got.get(run) != expected[run]]
    print(f"exact: {len(expected) - len(differing)} of {len(expected)} runs equal replay")


if __name__ == "__main__":
    asyncio.run(main())
