"""The fleet app as a real process on the real broker, tallies written as the worker writes them."""

from __future__ import annotations

import asyncio
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import changelog_topic
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from tests.kafka_harness import StallwatchProcess, free_port
from tests.waiting import until

# Small windows so a test sees an incident open and close in seconds: 6 s wide, 1 s step,
# closed 3 s of event time after its rule last held.
FAST = {
    "STALLWATCH_FLEET_WINDOW_S": "6",
    "STALLWATCH_FLEET_STEP_S": "1",
    "STALLWATCH_FLEET_QUIET_S": "3",
    "STALLWATCH_FLEET_TICK_INTERVAL_S": "0.2",
    "STALLWATCH_FLEET_SESSION_TIMEOUT_S": "6",
}


class FleetProcess(StallwatchProcess):
    """`stallwatch fleet`, in a directory of its own (Faust writes one)."""

    def __init__(
        self,
        settings: Settings,
        name: str = "f",
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.web_port = self.metrics_port = free_port()
        super().__init__(
            settings,
            "fleet",
            f"fleet-{name}",
            {"STALLWATCH_FLEET_WEB_PORT": str(self.web_port), **FAST, **(env or {})},
            argv=command,
            cwd=tempfile.mkdtemp(prefix=f"fleet-{name}-"),
        )

    def rss(self) -> int:
        """Resident memory of the process, in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}{path}", timeout=2) as r:
                return r.read()
        except OSError:
            return None

    def open_incidents(self, tenant: str | None = "acme") -> list[dict[str, Any]]:
        """One tenant's open incidents (None: the shared topic's), as its view lists them."""
        body = self.get("/incidents/" if tenant is None else f"/incidents/{tenant}/")
        return [] if body is None else orjson.loads(body)["open"]

    def has_metric(self, name: str) -> bool:
        body = (self.get("/metrics") or b"").decode()
        return any(line.startswith(name) for line in body.splitlines())

    async def serving(self, timeout_s: float = 90.0) -> None:
        """Until its web view answers and it has joined its group (partitions assigned)."""

        async def ready() -> bool:
            assert self.alive(), f"fleet app exited:\n{self.log_tail()}"
            answers = await asyncio.to_thread(self.get, "/health/ready") is not None
            return answers and "Ready" in self.log_path.read_text(errors="replace")

        await until(ready, timeout_s, lambda: f"the fleet app serving:\n{self.log_tail()}", interval_s=0.3)


def tally(
    tool: str,
    ts: float,
    *,
    tenant: str | None = "acme",
    runs: list[str] = (),  # type: ignore[assignment]
    calls: int = 0,
    failures: int = 0,
    stops: list[str] = (),  # type: ignore[assignment]
    answers: list[dict[str, Any]] = (),
) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "v": 1,
        "tenant": tenant,
        "tool": tool,
        "ts": ts,
        "calls": calls,
        "failures": failures,
        "runs": list(runs),
        "stops": list(stops),
        "answers": list(answers),
        "dropped": 0,
    }


class Tallies:
    """A plain producer writing tallies as the decision worker does: transactional, on a
    partition of the caller's choice (the worker writes on its batch's partition)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap,
            transactional_id=f"tallies-{settings.topic_prefix}-{id(self)}",
        )

    async def __aenter__(self) -> Tallies:
        await ensure_topics(self.settings)
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def send(self, records: list[dict[str, Any]], partition: int | None = None) -> None:
        """One transaction; a record goes to `partition`, else to its first run's partition."""
        async with self.producer.transaction():
            for i, record in enumerate(records):
                where = partition if partition is not None else i % self.settings.partitions
                await self.producer.send(
                    self.settings.tallies_topic,
                    orjson.dumps(record),
                    key=tally_key(record["tenant"], record["tool"]),
                    partition=where,
                )

    async def send_raw(
        self, value: bytes, key: bytes | None, partition: int = 0, topic: str | None = None
    ) -> None:
        """One record as given, to the tallies topic unless `topic` says another."""
        async with self.producer.transaction():
            await self.producer.send(
                topic or self.settings.tallies_topic, value, key=key, partition=partition
            )


class Reader:
    """Reads a topic from the start (read_committed) and keeps everything seen."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=settings.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self.records: list[tuple[bytes | None, dict[str, Any]]] = []

    async def __aenter__(self) -> Reader:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def poll(self, seconds: float = 0.5) -> None:
        batches = await self.consumer.getmany(timeout_ms=int(seconds * 1000))
        for records in batches.values():
            self.records.extend((r.key, orjson.loads(r.value)) for r in records if r.value is not None)

    async def until(self, check: Any, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until `check(values)` is true; return the values."""

        async def checked() -> tuple[list[dict[str, Any]]] | None:
            await self.poll()  # waits for records itself: no pause between looks
            values = [v for _, v in self.records]
            return (values,) if check(values) else None  # a tuple: no records may be the answer

        def what() -> str:
            return f"the records checked for; seen {len(self.records)}: {self.records[-5:]}"

        [values] = await until(checked, timeout_s, what, interval_s=0.0)
        return values

    async def settle(self, seconds: float) -> None:
        """Read on for `seconds` more: a record beyond those a test expected shows within it."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            await self.poll(min(left, 0.5))


async def changelog_runs(settings: Settings) -> set[str]:
    """The runs in the windows the table's changelog holds, committed, now: what an app that
    restores the table (after a restart, or taking a partition over) finds."""
    reader = committed_reader({"bootstrap_servers": settings.bootstrap})
    await reader.start()
    runs: set[str] = set()

    def keep(_: TopicPartition, records: list[Any]) -> None:
        for r in records:
            state = orjson.loads(r.value) if r.value else {}
            runs.update(run for bucket in state.get("buckets", {}).values() for run in bucket["runs"])

    try:
        tps = [
            TopicPartition(changelog_topic(FleetSettings(base=settings)).name, p)
            for p in range(settings.partitions)
        ]
        reader.assign(tps)
        await reader.seek_to_beginning(*tps)
        await read_to_end(reader, tps, keep)
    finally:
        await reader.stop()
    return runs


async def until_in_changelog(settings: Settings, runs: set[str], timeout_s: float = 60.0) -> None:
    """Until the table's changelog holds windows with every one of `runs` (a commit interval
    after the app applied them)."""

    async def saved() -> bool:
        return runs <= await changelog_runs(settings)

    await until(saved, timeout_s, f"the table's changelog holding {sorted(runs)}", interval_s=0.2)


def _runs(value: bytes | None) -> str:
    """What a tallies, partials or changelog record says about runs, in a few characters."""
    if value is None:
        return "tombstone"
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return "not JSON"
    if "tick" in record:
        return "tick"
    runs = record.get("runs") or sorted({r for b in record.get("buckets", {}).values() for r in b["runs"]})
    return ",".join(r.removeprefix("run-") for r in runs) or "-"


async def fleet_evidence(settings: Settings) -> str:
    """Where each run's tally went, for a failure message: every record of the tallies, partials
    and table changelog topics (runs named, ticks counted) and the fleet group's committed
    offsets. It tells an input the app never read (committed past a tally with no partial), a
    partial never applied and a window state lost (a changelog record without the runs before)."""
    group = FleetSettings(base=settings).group_id
    topics = {
        "tallies": settings.tallies_topic,
        "partials": settings.fleet_partials_topic,
        "changelog": f"{group}-fleet-state-changelog",
    }
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    lines = []
    for label, topic in topics.items():
        reader = committed_reader({"bootstrap_servers": settings.bootstrap})
        await reader.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
            reader.assign(tps)
            await reader.seek_to_beginning(*tps)
            seen: list[str] = []
            ticks: dict[int, int] = {}

            def keep(
                tp: TopicPartition, records: list[Any], seen: list[str] = seen, ticks: dict[int, int] = ticks
            ) -> None:
                for r in records:
                    runs = _runs(r.value)
                    if runs == "tick":
                        ticks[tp.partition] = ticks.get(tp.partition, 0) + 1
                    else:
                        seen.append(f"p{tp.partition}@{r.offset}:{runs}")

            await read_to_end(reader, tps, keep)
        finally:
            await reader.stop()
        offsets = {tp.partition: meta.offset for tp, meta in committed.items() if tp.topic == topic}
        lines.append(
            f"{label}: {' '.join(seen) or 'none'}"
            + (f" (ticks per partition {ticks})" if ticks else "")
            + ("" if label == "changelog" else f"; committed {dict(sorted(offsets.items()))}")
        )
    return "\n".join(lines)
