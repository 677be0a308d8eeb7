"""The fleet app at the decision worker's full throughput.

    python benchmarks/fleet_bench.py [--rate 40000] [--seconds 60] [--batch 100] [--keys 20000]

Tallies are made from the benchmark fleet log as the decision worker writes them: the log's
events are split by run over the partitions, cut into batches of `--batch` events per partition,
and each batch gives one tally per (tenant, tool) it touched (calls, failures, runs, result
fingerprints with their argument digests). They are written at the pace of `--rate` events/s (the
worker's measured throughput, benchmarks/README.md) with one fleet app as a real process.
(a) lag: the fleet group's lag on the tallies topic, sampled every 5 s for `--seconds`;
(b) latency: every 2 s a tool of its own breaks in 5 runs, twice: as tallies written straight to
    the tallies topic (the time from the crossing tally to its first fleet_advisory in the events
    topic: the fleet app's own step), and as events (run_started, round_started, call_proposed,
    a failed call_result) through a real decision worker (the time from the crossing event, the
    last failed result, to the advisory: the worker's batch transaction included). The worker
    serves only these runs; the fleet app carries the whole tally load;
(c) memory: the fleet app's resident memory before and after `--keys` new (tenant, tool) keys.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from xxhash import xxh3_128_hexdigest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fleet_log import fleet_events
from stallwatch.contract.envelope import envelope
from stallwatch.kafka.topics import ensure_topics
from stallwatch.logs import configure as configure_logging
from stallwatch.settings import Settings
from stallwatch_streams.fleet.tally import tally_key
from stallwatch_streams.fleet.tasks import partition_of
from tests.kafka_harness import WorkerProcess, fresh_settings, kafka, wait_until_serving
from tests.streams.fleet.harness import FleetProcess, tally

PARTITIONS = 8


def worker_tallies(runs: int, batch: int) -> list[tuple[int, int, dict]]:
    """(partition, events in the batch, tally) in the order a worker would write them."""
    queues: dict[int, list[dict]] = defaultdict(list)
    for event in fleet_events(runs):
        queues[partition_of(event["run_id"].encode(), PARTITIONS)].append(event)
    out: list[tuple[int, int, dict]] = []
    cursors = dict.fromkeys(queues, 0)
    while cursors:
        for partition in list(cursors):
            events = queues[partition][cursors[partition] : cursors[partition] + batch]
            cursors[partition] += batch
            if not events:
                del cursors[partition]
                continue
            tenants = {e["run_id"]: e.get("tenant") for e in events if e["type"] == "run_started"}
            per_key: dict[tuple, dict] = {}
            for e in events:
                if e["type"] not in ("call_proposed", "call_result"):
                    continue
                key = (tenants.get(e["run_id"], "bench"), e["tool"])
                t = per_key.setdefault(key, tally(e["tool"], e["ts"], tenant=key[0]))
                t["ts"] = max(t["ts"], e["ts"])
                if e["run_id"] not in t["runs"]:
                    t["runs"].append(e["run_id"])
                if e["type"] == "call_result":
                    t["calls"] += 1
                    t["failures"] += e["status"] in ("error", "overloaded")
                    if e["status"] == "ok" and e["tool"] != "wait_for_researchers":
                        fp = xxh3_128_hexdigest(orjson.dumps(e["result"], option=orjson.OPT_SORT_KEYS))
                        if not any(a["fingerprint"] == fp for a in t["answers"]) and len(t["answers"]) < 16:
                            t["answers"].append(
                                {
                                    "fingerprint": fp,
                                    "runs": [e["run_id"]],
                                    "args": [xxh3_128_hexdigest(e["call_id"].encode())],
                                }
                            )
            out.extend((partition, len(events), t) for t in per_key.values())
    return out


async def lag(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, group: str, topic: str) -> int:
    committed = await admin.list_consumer_group_offsets(group)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = await consumer.end_offsets(parts)
    return sum(
        ends[tp] - (committed[tp].offset if tp in committed and committed[tp].offset >= 0 else 0)
        for tp in parts
    )


async def advisories(settings, seen: dict[str, float], stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(
        settings.events_topic,
        bootstrap_servers=settings.bootstrap,
        auto_offset_reset="latest",
        fetch_max_wait_ms=10,
    )
    await consumer.start()
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for r in records:
                    value = orjson.loads(r.value)
                    if value.get("type") == "fleet_advisory":
                        seen.setdefault(value["tool"], time.perf_counter())
    finally:
        await consumer.stop()


def breaking_events(tool: str, runs: int = 5) -> list[dict]:
    """`runs` runs on the shared topic (so of no tenant) each calling `tool` once and failing: the
    last failed result crosses tool_failing's threshold."""
    now = time.time()
    events: list[dict] = []
    for i in range(runs):
        run_id = f"e-{tool}-{i}"
        events += [
            envelope(
                "run_started",
                run_id,
                f"{run_id}:0",
                now,
                mode="researcher",
                tools=[{"name": tool}],
            ),
            envelope("round_started", run_id, f"{run_id}:1", now, round=1),
            envelope(
                "call_proposed",
                run_id,
                f"{run_id}:2",
                now,
                round=1,
                call_id="c1",
                tool=tool,
                args={"q": run_id},
            ),
        ]
    events += [
        envelope(
            "call_result",
            f"e-{tool}-{i}",
            f"e-{tool}-{i}:3",
            now,
            round=1,
            call_id="c1",
            tool=tool,
            status="error",
            result={"error": "down"},
        )
        for i in range(runs)
    ]
    return events


def percentiles(name: str, delays: list[float], of: int) -> str:
    if not delays:
        return f"{name}: no advisory seen for {of} incidents"
    delays = sorted(delays)
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    return (
        f"{name}: {len(delays)} of {of} incidents, p50 {statistics.median(delays) * 1000:.0f} "
        f"ms, p99 {p99 * 1000:.0f} ms (target p99 <= 5 s)"
    )


# The fleet app's windows as the figures need them: long enough to hold every crossing.
FLEET_ENV = {
    "STALLWATCH_FLEET_WINDOW_S": "300",
    "STALLWATCH_FLEET_STEP_S": "60",
    "STALLWATCH_FLEET_QUIET_S": "300",
    "STALLWATCH_FLEET_TICK_INTERVAL_S": "1",
}


def delays(seen: dict[str, float], crossed: dict[str, float]) -> list[float]:
    """From each broken tool's crossing to its advisory, for the tools whose advisory came."""
    return [seen[t] - crossed[t] for t in crossed if t in seen]


async def break_two_tools(
    settings: Settings,
    producer: AIOKafkaProducer,
    crossed: dict[str, float],
    crossed_by_event: dict[str, float],
) -> None:
    """A tool broken by tallies and one broken by events, each noted when its crossing one is sent."""
    tool = f"broken-{uuid.uuid4().hex[:8]}"
    now = time.time()
    for run in range(5):
        bad = tally(tool, now, tenant="bench", runs=[f"b-{tool}-{run}"], calls=1, failures=1)
        await producer.send(
            settings.tallies_topic,
            orjson.dumps(bad),
            key=tally_key("bench", tool),
            partition=run % PARTITIONS,
        )
    await producer.flush()
    crossed[tool] = time.perf_counter()
    tool = f"broken-by-events-{uuid.uuid4().hex[:8]}"
    for event in breaking_events(tool):
        await producer.send(settings.events_topic, orjson.dumps(event), key=event["run_id"].encode())
    await producer.flush()
    crossed_by_event[tool] = time.perf_counter()


async def memory(settings: Settings, fleet: FleetProcess, producer: AIOKafkaProducer, keys: int) -> str:
    """(c): the fleet app's memory before and after `keys` new (tenant, tool) keys."""
    before = fleet.rss()
    keys_before = fleet.metric("stallwatch_fleet_tracked_keys")
    for k in range(keys):
        record = tally(f"tool-{k}", time.time(), tenant="mem", runs=[f"run-{k}"], calls=1)
        await producer.send(
            settings.tallies_topic,
            orjson.dumps(record),
            key=tally_key("mem", f"tool-{k}"),
            partition=k % PARTITIONS,
        )
    await producer.flush()
    deadline = time.monotonic() + 300
    while (
        fleet.metric("stallwatch_fleet_tracked_keys") < keys_before + keys * 0.99
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(1.0)
    await asyncio.sleep(2.0)
    added = fleet.metric("stallwatch_fleet_tracked_keys") - keys_before
    after = fleet.rss()
    return (
        f"(c) memory: {before / 1e6:.0f} MB -> {after / 1e6:.0f} MB for {added:,.0f} more keys: "
        f"{(after - before) / max(added, 1):,.0f} bytes per tracked (tenant, tool)"
    )


async def send_load(
    args: argparse.Namespace,
    settings: Settings,
    records: list[tuple[int, int, dict]],
    producer: AIOKafkaProducer,
    group_lag: Callable[[], Awaitable[int]],
    crossed: dict[str, float],
    crossed_by_event: dict[str, float],
) -> tuple[int, int, list[tuple[float, int]]]:
    """(a): the tallies at the rate for the time asked, two tools broken every 2 s, the fleet
    group's lag every 5 s. The events their tallies stand for, the records sent, the lags."""
    start, sent_events, i, next_sample, next_break = time.perf_counter(), 0, 0, 0.0, 2.0
    samples: list[tuple[float, int]] = []
    while (elapsed := time.perf_counter() - start) < args.seconds:
        due = args.rate * elapsed
        while sent_events < due:
            partition, n, record = records[i % len(records)]
            record = {**record, "ts": time.time()}
            await producer.send(
                settings.tallies_topic,
                orjson.dumps(record),
                key=tally_key(record["tenant"], record["tool"]),
                partition=partition,
            )
            sent_events += n
            i += 1
        if elapsed >= next_break:
            await break_two_tools(settings, producer, crossed, crossed_by_event)
            next_break += 2.0
        if elapsed >= next_sample:
            samples.append((elapsed, await group_lag()))
            next_sample += 5.0
        await asyncio.sleep(0.005)
    return sent_events, i, samples


async def run(args: argparse.Namespace) -> None:
    settings = fresh_settings(PARTITIONS)
    await ensure_topics(settings)
    records = worker_tallies(args.runs, args.batch)
    events_total = sum(n for _, n, _ in records)
    print(
        f"load: {len(records):,} tallies from {events_total:,} events "
        f"({args.batch} events per partition batch), at {args.rate:,} events/s "
        f"= {len(records) * args.rate / events_total:,.0f} tallies/s"
    )
    fleet = FleetProcess(settings, "bench", env=FLEET_ENV)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, linger_ms=5)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    probe = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap)
    worker = WorkerProcess(settings, "bench")
    seen: dict[str, float] = {}
    crossed: dict[str, float] = {}  # tool broken by tallies -> when its crossing tally was sent
    crossed_by_event: dict[str, float] = {}  # tool broken by events -> when the crossing one was
    stop = asyncio.Event()
    try:
        await asyncio.gather(fleet.serving(), wait_until_serving(settings))
        await producer.start()
        await admin.start()
        await probe.start()
        reader = asyncio.create_task(advisories(settings, seen, stop))
        await asyncio.sleep(1.0)
        group_lag = partial(lag, admin, probe, f"{settings.topic_prefix}-fleet", settings.tallies_topic)
        start = time.perf_counter()
        sent_events, i, samples = await send_load(
            args, settings, records, producer, group_lag, crossed, crossed_by_event
        )
        await producer.flush()
        samples.append((time.perf_counter() - start, await group_lag()))
        await asyncio.sleep(5.0)
        stop.set()
        await reader
        print(f"(a) sent {sent_events:,} events' tallies ({i:,} records) in {args.seconds:g} s")
        print(
            "    lag of the fleet group on the tallies topic (records), every 5 s: "
            + ", ".join(f"{t:.0f}s:{n}" for t, n in samples)
        )
        print(
            percentiles("(b) crossing tally to advisory (the fleet app)", delays(seen, crossed), len(crossed))
        )
        print(
            percentiles(
                "    crossing event to advisory (the worker and the fleet app)",
                delays(seen, crossed_by_event),
                len(crossed_by_event),
            )
        )
        print(await memory(settings, fleet, producer, args.keys))
    finally:
        stop.set()
        fleet.stop()
        worker.stop()
        await producer.stop()
        await admin.close()
        await probe.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=40_000, help="worker events/s the tallies stand for")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=100, help="events per worker partition batch")
    parser.add_argument("--runs", type=int, default=2_000, help="runs of the fleet log to cycle")
    parser.add_argument("--keys", type=int, default=20_000, help="new keys for the memory figure")
    args = parser.parse_args()
    kafka("up")
    asyncio.run(run(args))


if __name__ == "__main__":
    configure_logging("WARNING")  # the figures on stdout; only what goes wrong on stderr
    main()
