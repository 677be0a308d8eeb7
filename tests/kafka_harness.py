"""Real-broker test harness: the project's local Kafka, worker processes, a log producer and a
command collector. No mocks: everything here talks to Apache Kafka over TCP."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import ClassVar

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError

from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from stallwatch.kafka.options import connection_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings
from tests.addresses import BOOTSTRAP as BOOTSTRAP
from tests.addresses import free_port as free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]


def kafka(command: str) -> None:
    subprocess.run([str(ROOT / "deploy/kafka/kafka.sh"), command], check=True, timeout=600)
    if command == "up":
        # The port answers before the controller has unfenced the broker: wait until listed.
        until_listed()
        # A broker started empty makes its offsets topic at the first group's lookup, and each
        # group's client logs the refusals until then: the first test or benchmark would.
        run_aside(until_group_coordinator())


def until_listed() -> None:
    """`until_broker_listed` from sync code."""
    run_aside(until_broker_listed())


def run_aside(wait: Coroutine[object, object, None]) -> None:
    """`wait` run to its end from sync code, whether or not an event loop runs in this thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, wait).result()


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
    except BaseException:
        os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(AssertionError):  # the body's failure is the one to report
            until_listed()
        raise
    os.kill(pid, signal.SIGCONT)
    # Thawed, the broker is fenced by its controller until its next heartbeat and lists no
    # broker: wait that out here, so that the next test does not start in it.
    until_listed()


# How long the broker must list itself without a break: a broker just thawed may answer from
# its metadata of before the freeze for a moment, before it applies its own fencing.
LISTED_STEADY_S = 2.0


async def until_broker_listed(timeout_s: float = 60.0) -> None:
    """Until the broker's metadata has listed a broker in every answer for LISTED_STEADY_S (or
    `timeout_s` passed, then AssertionError)."""
    listed_since: float | None = None

    async def listed_steadily() -> bool:
        nonlocal listed_since
        admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
        try:
            await admin.start()
            listed = bool((await admin.describe_cluster()).get("brokers"))
        except KafkaError:
            listed = False
        finally:
            await admin.close()
        if not listed:
            listed_since = None
        elif listed_since is None:
            listed_since = time.monotonic()
        return listed_since is not None and time.monotonic() - listed_since >= LISTED_STEADY_S

    what = f"the broker at {BOOTSTRAP} listing itself steadily for {LISTED_STEADY_S:g} s"
    await until(listed_steadily, timeout_s, what, interval_s=0.25)


async def until_group_coordinator(timeout_s: float = 60.0) -> None:
    """Until the broker names a consumer group's coordinator (`timeout_s`, then AssertionError)."""

    async def named() -> bool:
        client = AIOKafkaClient(bootstrap_servers=BOOTSTRAP)
        try:
            await client.bootstrap()
            await client.coordinator_lookup(CoordinationType.GROUP, "stallwatch-harness")
        except KafkaError:
            return False
        finally:
            await client.close()
        return True

    await until(named, timeout_s, f"a group coordinator at {BOOTSTRAP}", interval_s=0.25)


# Kafka API keys the link tells apart: a cut can wait for a write or a commit of a transaction
# (and hold that very request), and heartbeats are timed so that a cut can end before the group
# session that they keep alive expires.
PRODUCE, HEARTBEAT, END_TXN = 0, 12, 26


class CuttableLink:
    """A TCP proxy between clients and the broker's CUTTABLE listener (`deploy/kafka/kafka.sh`:
    the broker listens on port+4 and advertises port+5, where this proxy listens: one at a time,
    so its tests carry `xdist_group("cuttable-link")` for make test's parallel lane). A worker
    bootstrapped on `bootstrap` reaches the broker only through here, so `cut()` is a network
    partition of that worker alone: nothing crosses either way, and bytes already sent are held,
    as TCP holds them while it retransmits, until `heal()` delivers them. With `drop=True` the cut
    also resets every open connection, as a firewall that rejects would. A connection opened during
    a cut waits for the heal, as a SYN that is never answered. The proxy never looks inside a
    request beyond its API key."""

    def __init__(self) -> None:
        port = int(os.environ.get("STALLWATCH_KAFKA_PORT", "9092"))
        self.port, self.broker_port = port + 5, port + 4
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.cut_seen = asyncio.Event()  # set when a cut begins
        self.last_heartbeat = 0.0  # monotonic time the last Heartbeat request went to the broker
        self._open = asyncio.Event()
        self._open.set()
        self._cut_at: int | None = None
        self._drop_at_cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttableLink:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.heal()
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def cut(self, drop: bool = False) -> None:
        self._open.clear()
        self.cut_seen.set()
        if drop:
            for writer in list(self._writers):
                writer.transport.abort()

    def cut_at(self, api_key: int, drop: bool = False) -> None:
        """Cut as the next request of this kind arrives, holding it (or, with `drop`, losing it
        with its connection): e.g. a commit in flight."""
        self._cut_at, self._drop_at_cut = api_key, drop

    def heal(self) -> None:
        self._open.set()

    async def _serve(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        self._writers.add(client)
        this = asyncio.current_task()
        assert this is not None
        self._connections.add(this)
        broker: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()
            broker_reader, broker = await asyncio.open_connection("127.0.0.1", self.broker_port)
            self._writers.add(broker)
            pipes = {
                asyncio.create_task(self._requests(client_reader, broker)),
                asyncio.create_task(self._responses(broker_reader, client)),
            }
            # Either side closing (or a reset) ends the connection on both.
            _, pending = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        except OSError:
            pass
        finally:
            self._connections.discard(this)
            for writer in (client, broker):
                if writer is not None:
                    self._writers.discard(writer)
                    writer.transport.abort()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Client to broker, a whole request at a time (size, then api key first in its header)."""
        with contextlib.suppress(asyncio.IncompleteReadError, OSError):
            while True:
                head = await reader.readexactly(6)
                size, api_key = struct.unpack(">ih", head)
                request = head + await reader.readexactly(size - 2)
                if api_key == self._cut_at:
                    self._cut_at = None
                    self.cut(self._drop_at_cut)
                await self._open.wait()
                if api_key == HEARTBEAT:
                    self.last_heartbeat = time.monotonic()
                writer.write(request)
                await writer.drain()

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while chunk := await reader.read(65536):
                await self._open.wait()
                writer.write(chunk)
                await writer.drain()


def fresh_settings(partitions: int = 4) -> Settings:
    """Settings with a topic prefix of their own, so tests never see each other's data."""
    return Settings(
        bootstrap=BOOTSTRAP,
        topic_prefix=f"t{uuid.uuid4().hex[:10]}",
        partitions=partitions,
        replication_factor=1,
        min_insync_replicas=1,
    )


class StallwatchProcess:
    """A `stallwatch` command as a child process on the test's topics, as an operator would run
    it: its output in a log file, stopped with SIGTERM (or SIGKILL, as a fault)."""

    # Every process started, so that a failed test shows their logs (tests/conftest.py).
    started: ClassVar[list[StallwatchProcess]] = []

    def __init__(
        self,
        settings: Settings,
        command: str,
        log_name: str,
        env: dict[str, str],
        argv: list[str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.settings = settings
        self.log_path = Path(f"/tmp/stallwatch-{settings.topic_prefix}-{log_name}.log")
        full = {
            **os.environ,
            "STALLWATCH_BOOTSTRAP": settings.bootstrap,
            "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
            "STALLWATCH_PARTITIONS": str(settings.partitions),
            "STALLWATCH_REPLICATION_FACTOR": "1",
            "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
            # The checkout is importable wherever the process runs (cwd may be elsewhere).
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            **env,
        }
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "stallwatch.cli.main", command],
            env=full,
            cwd=cwd,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        StallwatchProcess.started.append(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no flush, no commit."""
        self.kill_time()

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

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_size(self) -> int:
        """How much the log holds now: `until_said`'s `since`, to wait for a line said after."""
        return len(self.log_path.read_text(errors="replace"))

    async def until_said(self, text: str, timeout_s: float = 60.0, since: int = 0) -> None:
        """Until the log says `text` past its first `since` characters; AssertionError with the
        log's tail at the deadline, or at once if the process ended without saying it."""

        def said() -> bool:
            if text in self.log_path.read_text(errors="replace")[since:]:
                return True
            assert self.alive(), f"ended ({self.proc.returncode}) before saying {text!r}:\n{self.log_tail()}"
            return False

        await until(said, timeout_s, lambda: f"the log saying {text!r}:\n{self.log_tail()}", interval_s=0.05)

    async def until_metric(
        self, name: str, holds: Callable[[float], bool], timeout_s: float = 60.0, interval_s: float = 0.1
    ) -> float:
        """The metric's value (`metric`) once `holds` it; AssertionError with the log's tail and
        the last value seen at the deadline, or at once if the process ended."""
        seen = [0.0]

        async def held() -> bool:
            seen[0] = await asyncio.to_thread(self.metric, name)
            if holds(seen[0]):
                return True
            assert self.alive(), f"ended ({self.proc.returncode}), {name} at {seen[0]:g}:\n{self.log_tail()}"
            return False

        def what() -> str:
            return f"{name} as wanted (last {seen[0]:g}):\n{self.log_tail()}"

        await until(held, timeout_s, what, interval_s)
        return seen[0]

    metrics_port = 0  # where it serves Prometheus metrics (set by each kind)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on its /metrics (0 when absent or not answering)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                body = r.read().decode()
        except OSError:
            return 0.0
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in body.splitlines()
            if line.startswith(name) and not line.startswith("#")
        )


class WorkerProcess(StallwatchProcess):
    """`stallwatch worker`."""

    def __init__(self, settings: Settings, name: str = "w", env: dict[str, str] | None = None) -> None:
        self.web_port, self.metrics_port = free_port(), free_port()
        super().__init__(
            settings,
            "worker",
            name,
            {
                "STALLWATCH_WEB_PORT": str(self.web_port),
                "STALLWATCH_METRICS_PORT": str(self.metrics_port),
                "STALLWATCH_LOG_LEVEL": "INFO",
                **(env or {}),
            },
        )

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

        async def ready() -> bool:
            return await asyncio.to_thread(self.health) == 200

        async def ready_or_ended() -> bool:
            return not self.alive() or await ready()

        with contextlib.suppress(AssertionError):
            await until(ready_or_ended, timeout_s, "the worker ready or ended", interval_s=0.2)
        if not self.alive() or not await ready():
            raise AssertionError(f"worker not ready after {timeout_s} s:\n{self.log_tail()}")

    def assignments(self) -> list[list[int]]:
        """Every assignment the worker's log reports serving, in order."""
        served = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            msg = json.loads(line).get("msg", "") if line.startswith("{") else ""
            if msg.startswith("serving partitions ["):
                served.append(json.loads(msg[len("serving partitions ") : msg.index("]") + 1]))
        return served

    async def serving(self, count: int, timeout_s: float) -> bool:
        """Until the worker's latest assignment has `count` partitions (False if it never does)."""
        try:
            await until(
                lambda: (served := self.assignments()) and len(served[-1]) == count,
                timeout_s,
                f"the worker serving {count} partitions",
            )
        except AssertionError:
            return False
        return True


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


async def produce(
    settings: Settings,
    lines: list[bytes],
    keys: list[bytes | None] | None = None,
    pause_every: int = 0,
    pause_s: float = 0.0,
) -> None:
    producer = AIOKafkaProducer(acks="all", linger_ms=5, **connection_options(settings))
    await producer.start()
    try:
        for i, line in enumerate(lines):
            key = keys[i] if keys else orjson.loads(line)["run_id"].encode()
            await producer.send(settings.events_topic, line, key=key)
            if pause_every and i % pause_every == pause_every - 1:
                await producer.flush()
                await asyncio.sleep(pause_s)  # the thing asked for: the events spread over time
        await producer.flush()
    finally:
        await producer.stop()


# How long a test reads on past the records it expects: a record beyond them (a second content, a
# command replay would not make) shows within it, and no test waits out its whole timeout.
SETTLE_S = 5.0


async def collect(
    settings: Settings, topic: str, until: int, timeout_s: float, settle_s: float = 0.0
) -> list[bytes]:
    """Read a topic from the start until `until` distinct records arrived (commands count once
    per command id, since a crash may send one twice) or the time is up; then `settle_s` more,
    so that a record beyond the expected ones (a second content, a decision replay would not
    make) is seen too. The answers to `wait_until_serving`'s probes are returned but never
    counted: `until` is what the test expects of its own log, and a probe's command, first on
    the topic, would otherwise end the read one record short of it."""
    consumer = AIOKafkaConsumer(
        topic,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **connection_options(settings),
    )
    await consumer.start()
    values: list[bytes] = []
    distinct: set = set()
    deadline = time.monotonic() + timeout_s
    settled: float | None = None
    try:
        while time.monotonic() < (deadline if settled is None else settled):
            if settled is None and len(distinct) >= until:
                settled = time.monotonic() + settle_s
                continue
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for r in records:
                    values.append(r.value)
                    if not (r.key or b"").startswith(PROBE_PREFIX.encode()):
                        distinct.add(_identity(r.value) or (r.partition, r.offset))
    finally:
        await consumer.stop()
    return values


def _identity(value: bytes | None) -> str | None:
    """A command's id; None for anything else (a dead letter, a state, a tombstone)."""
    decoded = orjson.loads(value) if value else None
    return decoded.get("command_id") if isinstance(decoded, dict) else None


async def stored_events(settings: Settings) -> list[bytes]:
    """The events topic as the broker holds it, each partition in offset order: the log the
    worker read. Replayed, it is the reference when the producer itself may have failed or
    retried (a broker restart under load), where the list the test meant to send is not."""
    consumer = committed_reader({"bootstrap_servers": settings.bootstrap})
    await consumer.start()
    try:
        tps = [TopicPartition(settings.events_topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        lines: list[bytes] = []
        await read_to_end(consumer, tps, lambda _, records: lines.extend(r.value for r in records))
        return lines
    finally:
        await consumer.stop()


def replay_commands(
    lines: list[bytes], advisory_key: bytes | None = None, tenant: str | None = None
) -> list[bytes]:
    """What the embedded engine answers for the same log: the reference for every Kafka test.
    `advisory_key`: the workers' STALLWATCH_ADVISORY_KEY, derived (`advisories.advisory_key`).
    `tenant`: the log is that tenant's events topic."""
    out: list[bytes] = []
    for result in EmbeddedEngine(advisory_key=advisory_key, tenant=tenant).replay(lines):
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


def run_difference(expected: list[bytes], got: list[bytes] | None) -> str:
    """How one run's commands differ from replay's, command by command (type, round, call,
    decision or code, cause), for a failure's message."""

    def short(raw: bytes) -> str:
        c = orjson.loads(raw)
        said = c.get("decision") or c.get("code") or ""
        if c.get("decision") and c.get("code"):
            said = f"{c['decision']}:{c['code']}"
        return f"{c['type']}@{c['round']}/{c.get('call_id', '-')}/{said}/{c['caused_by']}"

    want = [short(r) for r in expected]
    have = [short(r) for r in got or []]
    return f"replay {want}; got {have}"


# The run ids of `wait_until_serving`'s probes (a command's key is its run id).
PROBE_PREFIX = "probe-"


async def wait_until_serving(
    settings: Settings, timeout_s: float = 90.0, partition: int | None = None
) -> None:
    """Send a probe run until the worker answers: joined the group and restored its states. With
    `partition`, the probe goes to that partition of the events topic."""
    probe = f"{PROBE_PREFIX}{uuid.uuid4().hex[:8]}"
    event = {
        "v": 1,
        "type": "call_proposed",
        "event_id": probe,
        "run_id": probe,
        "ts": 0.0,
        "round": 1,
        "call_id": "c",
        "tool": "t",
        "args": None,
    }
    consumer = AIOKafkaConsumer(
        settings.commands_topic,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **connection_options(settings),
    )
    await consumer.start()
    try:
        producer = AIOKafkaProducer(acks="all", **connection_options(settings))
        await producer.start()
        try:
            await producer.send_and_wait(
                settings.events_topic, orjson.dumps(event), key=probe.encode(), partition=partition
            )
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


async def publish_two_contents(settings: Settings, raw: bytes, key: bytes) -> None:
    """Command `raw`, then another content under its id (no worker writes that): what readers
    of the commands topic must refuse."""
    other = orjson.loads(raw)
    other["reason"] = "something else"
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
    await producer.start()
    try:
        for value in (raw, orjson.dumps(other)):
            await producer.send(settings.commands_topic, value, key=key)
    finally:
        await producer.stop()


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`stallwatch ARGS` as a process on these settings' broker and topics."""
    env = {
        **os.environ,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
        "STALLWATCH_PARTITIONS": str(settings.partitions),
        "STALLWATCH_REPLICATION_FACTOR": str(settings.replication_factor),
        "STALLWATCH_MIN_INSYNC_REPLICAS": str(settings.min_insync_replicas),
    }
    return subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
