"""Real-broker test harness: the project's local Kafka, worker processes, a log producer and a
command collector. No mocks: everything here talks to Apache Kafka over TCP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stallwatch.contract.commands import encode_command
from stallwatch.engine.fleet import Fleet, Rejected
from stallwatch.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = os.environ.get("STALLWATCH_BOOTSTRAP", "127.0.0.1:9092")


def kafka(command: str) -> None:
    subprocess.run([str(ROOT / "deploy/kafka/kafka.sh"), command], check=True, timeout=600)


def broker_pid() -> int:
    """The local broker's process id, as `deploy/kafka/kafka.sh` recorded it."""
    port = os.environ.get("STALLWATCH_KAFKA_PORT", "9092")
    return int((ROOT / f".cache/kafka-data/{port}/kafka.pid").read_text())


@contextlib.contextmanager
def frozen_broker() -> Iterator[None]:
    """The broker's process stopped (SIGSTOP): connections stay open and nothing answers, as
    with a broker stuck in a long GC pause or a network that drops packets. Resumed after."""
    pid = broker_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def fresh_settings(partitions: int = 4) -> Settings:
    """Settings with a topic prefix of their own, so tests never see each other's data."""
    return Settings(bootstrap=BOOTSTRAP, topic_prefix=f"t{uuid.uuid4().hex[:10]}",
                    partitions=partitions, replication_factor=1, min_insync_replicas=1)


def free_port() -> int:
    """A port nothing listens on now: tests on one machine (or several suites at once) never
    hand two workers the same web or metrics port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class WorkerProcess:
    """`stallwatch worker` as a child process, as an operator would run it."""

    def __init__(self, settings: Settings, name: str = "w", env: dict[str, str] | None = None) -> None:
        self.web_port, self.metrics_port = free_port(), free_port()
        self.settings = settings
        self.log_path = Path(f"/tmp/stallwatch-{settings.topic_prefix}-{name}.log")
        env = {**os.environ, "STALLWATCH_BOOTSTRAP": settings.bootstrap,
               "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
               "STALLWATCH_PARTITIONS": str(settings.partitions),
               "STALLWATCH_REPLICATION_FACTOR": "1", "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
               "STALLWATCH_WEB_PORT": str(self.web_port),
               "STALLWATCH_METRICS_PORT": str(self.metrics_port),
               "STALLWATCH_LOG_LEVEL": "INFO", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "stallwatch.cli", "worker"], env=env,
                                     stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no flush, no commit."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def kill_time(self) -> float:
        """SIGKILL, returning the moment it was sent (perf_counter)."""
        killed = time.perf_counter()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        return killed

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def health(self, path: str = "/health/ready") -> int:
        """The HTTP status of one of the worker's health endpoints (0 when nothing answers)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}{path}", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    async def ready(self, timeout_s: float = 60.0) -> None:
        """Wait until the worker says it is ready: joined the group, its partitions restored."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await asyncio.to_thread(self.health) == 200:
                return
            if not self.alive():
                break
            await asyncio.sleep(0.2)
        raise AssertionError(f"worker not ready after {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.asynccontextmanager
async def serving_worker(partitions: int = 4) -> AsyncIterator[tuple[Settings, WorkerProcess]]:
    """A worker on topics of its own, answering before the body runs, stopped after it."""
    settings = fresh_settings(partitions)
    worker = WorkerProcess(settings)
    try:
        await wait_until_serving(settings)
        yield settings, worker
    finally:
        worker.stop()


async def produce(settings: Settings, lines: list[bytes], keys: list[bytes | None] | None = None,
                  pause_every: int = 0, pause_s: float = 0.0) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for i, line in enumerate(lines):
            key = keys[i] if keys else orjson.loads(line)["run_id"].encode()
            await producer.send(settings.events_topic, line, key=key)
            if pause_every and i % pause_every == pause_every - 1:
                await producer.flush()
                await asyncio.sleep(pause_s)
        await producer.flush()
    finally:
        await producer.stop()


async def collect(settings: Settings, topic: str, until: int, timeout_s: float) -> list[bytes]:
    """Read a topic from the start until `until` distinct records arrived (commands count once
    per command id, since a crash may send one twice) or the time is up."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    values: list[bytes] = []
    distinct: set = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(distinct) < until and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for r in records:
                    values.append(r.value)
                    distinct.add(_identity(r.value) or (r.partition, r.offset))
    finally:
        await consumer.stop()
    return values


def _identity(value: bytes | None) -> str | None:
    """A command's id; None for anything else (a dead letter, a state, a tombstone)."""
    decoded = orjson.loads(value) if value else None
    return decoded.get("command_id") if isinstance(decoded, dict) else None


def replay_commands(lines: list[bytes]) -> list[bytes]:
    """What the embedded engine answers for the same log: the reference for every Kafka test."""
    out: list[bytes] = []
    for result in Fleet().replay(lines):
        if not isinstance(result, Rejected):
            out.extend(encode_command(c) for c in result)
    return out


def by_run(commands: list[bytes]) -> dict[str, list[bytes]]:
    """Commands per run, in order, keeping the first copy of each command id; fails when two
    copies of one id differ (a duplicate must be harmless)."""
    seen: dict[str, bytes] = {}
    runs: dict[str, list[bytes]] = defaultdict(list)
    for raw in commands:
        command = orjson.loads(raw)
        first = seen.setdefault(command["command_id"], raw)
        if first is not raw:
            assert first == raw, f"two different commands share id {command['command_id']}"
            continue
        runs[command["run_id"]].append(raw)
    return dict(runs)


async def wait_until_serving(settings: Settings, timeout_s: float = 90.0,
                             partition: int | None = None) -> None:
    """Send a probe run until the worker answers: joined the group and restored its states. With
    `partition`, the probe goes to that partition of the events topic."""
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    event = {"v": 1, "type": "call_proposed", "event_id": probe, "run_id": probe, "ts": 0.0,
             "round": 1, "call_id": "c", "tool": "t", "args": None}
    consumer = AIOKafkaConsumer(settings.commands_topic, bootstrap_servers=settings.bootstrap,
                                isolation_level="read_committed", auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(settings.events_topic, orjson.dumps(event),
                                         key=probe.encode(), partition=partition)
        finally:
            await producer.stop()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            if any(r.key == probe.encode() for records in batches.values() for r in records):
                return
    finally:
        await consumer.stop()
    raise AssertionError(f"no worker answered on {settings.topic_prefix} within {timeout_s} s")
