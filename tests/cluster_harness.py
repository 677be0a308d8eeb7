"""The local three-node Kafka cluster (deploy/kafka/cluster.sh) for tests and benchmarks: start
it, kill, freeze, thaw, restart or stop one node, and wait until the cluster is whole again.

Node N serves clients on STALLWATCH_CLUSTER_PORT + 10*(N-1) (default 9200, 9210, 9220)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy/kafka/cluster.sh"
NODES = (1, 2, 3)


def base_port() -> int:
    return int(os.environ.get("STALLWATCH_CLUSTER_PORT", "9200"))


def port_of(node: int) -> int:
    return base_port() + 10 * (node - 1)


def bootstrap(without: int | None = None) -> str:
    """The nodes' client addresses; `without` one node (a client that must not wait on it)."""
    return ",".join(f"127.0.0.1:{port_of(n)}" for n in NODES if n != without)


def script(*args: str) -> str:
    return subprocess.run(
        [str(SCRIPT), *args], check=True, text=True, capture_output=True, timeout=600
    ).stdout.strip()


def pid_of(node: int) -> int:
    return int((ROOT / f".cache/kafka-data/{port_of(node)}/kafka.pid").read_text())


def answering() -> bool:
    """Every node answers on its port (`cluster.sh status`)."""
    return "down" not in script("status")


def up() -> bool:
    """The cluster up and whole; True when this call started any node (so it stops them). A
    cluster it starts whole starts from empty storage (`cluster.sh fresh`)."""
    started = not answering()
    script("fresh")
    until_whole_sync()
    return started


def down() -> None:
    script("down")


def kill(node: int) -> float:
    """SIGKILL: the node's process dies at once, its connections reset. Returns when (monotonic)."""
    os.kill(pid_of(node), signal.SIGKILL)
    return time.monotonic()


def freeze(node: int) -> float:
    """SIGSTOP: the node's connections stay open and nothing answers, as in a long GC pause or a
    network that drops packets."""
    os.kill(pid_of(node), signal.SIGSTOP)
    return time.monotonic()


def thaw(node: int) -> None:
    os.kill(pid_of(node), signal.SIGCONT)


def start(node: int) -> None:
    """The node started again (after a kill or a stop), returning once it answers on its port."""
    script("start", str(node))


def stop(node: int) -> None:
    """A clean shutdown (SIGTERM): the node hands its leaderships over first, as in a rolling
    restart."""
    script("stop-clean", str(node))


@contextlib.contextmanager
def frozen(node: int):  # type: ignore[no-untyped-def]
    """The node frozen for the body, thawed after it (also when the body fails)."""
    freeze(node)
    try:
        yield
    finally:
        thaw(node)


async def describe(topics: list[str] | None = None, without: int | None = None) -> list[dict]:
    """Every partition of `topics` (all topics, Kafka's own included, by default) as the live
    nodes describe it: topic, partition, leader, replicas, isr."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(without), request_timeout_ms=5000)
    await admin.start()
    try:
        names = topics if topics is not None else sorted(await admin.list_topics())
        described = await admin.describe_topics(names)
    finally:
        await admin.close()
    return [{"topic": t["topic"], **p} for t in described for p in t["partitions"]]


async def leader_of_most(topic: str) -> int:
    """The node leading the most partitions of `topic`: the one whose loss moves the most."""
    leaders = Counter(p["leader"] for p in await describe([topic]))
    return leaders.most_common(1)[0][0]


async def is_whole() -> bool:
    """Every node listed, and every partition of every topic led and fully in sync."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(), request_timeout_ms=5000)
    try:
        await admin.start()
        brokers = (await admin.describe_cluster())["brokers"]
    except KafkaError:
        return False
    finally:
        await admin.close()
    if len(brokers) < len(NODES):
        return False
    try:
        partitions = await describe()
    except KafkaError:
        return False
    return all(p["leader"] in NODES and sorted(p["isr"]) == sorted(p["replicas"]) for p in partitions)


async def until_whole(timeout_s: float = 180.0) -> float:
    """Wait until the cluster is whole again (every replica back in sync); returns how long it
    took. AssertionError after `timeout_s`."""
    began = time.monotonic()
    await until(is_whole, timeout_s, f"the cluster at {bootstrap()} whole again", interval_s=0.5)
    return time.monotonic() - began


def until_whole_sync(timeout_s: float = 180.0) -> float:
    return asyncio.run(until_whole(timeout_s))
