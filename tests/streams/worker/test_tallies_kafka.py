"""The worker's tallies on a real broker: each batch's counts exactly once for a read_committed
reader, none from a transaction aborted by a SIGKILL."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from stallwatch.settings import Settings
from tests.kafka_harness import (
    END_TXN,
    SETTLE_S,
    CuttableLink,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka


def expected_calls(log: list[bytes]) -> Counter:
    """call_result events per tool: what the tallies' `calls` must add up to, exactly."""
    return Counter(e["tool"] for e in map(orjson.loads, log) if e["type"] == "call_result")


async def read_tallies(
    settings: Settings, isolation: str, quiet_s: float = 3.0, calls_at_least: int = 0, timeout_s: float = 90.0
) -> list[dict]:
    """Every tally in the topic, read until nothing more came for `quiet_s` and they count
    `calls_at_least` calls (a transaction still open holds read_committed readers back), or
    `timeout_s`."""
    consumer = AIOKafkaConsumer(
        settings.tallies_topic,
        bootstrap_servers=settings.bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[dict] = []
    last = time.monotonic()
    deadline = last + timeout_s
    try:
        while time.monotonic() - last < quiet_s or (
            sum(calls(out).values()) < calls_at_least and time.monotonic() < deadline
        ):
            for records in (await consumer.getmany(timeout_ms=300)).values():
                out += [orjson.loads(r.value) for r in records]
                last = time.monotonic()
    finally:
        await consumer.stop()
    return out


def calls(tallies: list[dict]) -> Counter:
    total: Counter = Counter()
    for tally in tallies:
        total[tally["tool"]] += tally["calls"]
    return total


async def test_every_batch_is_tallied_exactly_once():
    settings = fresh_settings(partitions=2)
    worker = WorkerProcess(settings)
    try:
        await wait_until_serving(settings)
        log = interleave(mixed_fleet(40))
        expected = replay_commands(log)
        await produce(settings, log)
        await collect(settings, settings.commands_topic, len(expected), 30, settle_s=SETTLE_S)
        tallies = await read_tallies(settings, "read_committed")
    finally:
        worker.stop()
    assert calls(tallies) == expected_calls(log)
    assert all(t["tenant"] is None and t["v"] == 1 for t in tallies)
    runs = {run for t in tallies if t["tool"] == "search" for run in t["runs"]}
    assert runs == {
        orjson.loads(line)["run_id"] for line in log if orjson.loads(line).get("tool") == "search"
    }


@pytest.mark.xdist_group("cuttable-link")
async def test_a_transaction_aborted_by_a_successor_leaves_no_tallies():
    """The worker's transaction commit (EndTxn) is lost on a cut link and the worker killed: its
    tallies are in the topic, uncommitted, until the successor's producer aborts them. A
    read_uncommitted reader then sees more calls than the log holds, read_committed exactly the
    log's."""
    settings = fresh_settings(partitions=1)
    log = interleave(mixed_fleet(40))
    expected = by_run(replay_commands(log))
    workers: list[WorkerProcess] = []
    async with CuttableLink() as link:
        try:
            workers.append(WorkerProcess(settings, "a", env={"STALLWATCH_BOOTSTRAP": link.bootstrap}))
            await wait_until_serving(settings)
            starts = 2 * 40  # every run's run_started and round_started: batches without tallies
            await produce(settings, log[:starts])
            # Their batches committed (counted after the commit), beside the probe's.
            await workers[0].until_metric("stallwatch_events_consumed_total", lambda n: n >= starts + 1)
            link.cut_at(END_TXN, drop=True)  # the next commit: a batch with calls in it
            producing = asyncio.create_task(produce(settings, log[starts:]))
            await asyncio.wait_for(link.cut_seen.wait(), 30)
            await asyncio.to_thread(workers[0].kill)
            workers.append(WorkerProcess(settings, "successor"))  # fences and aborts
            await producing
            got = await collect(
                settings, settings.commands_topic, sum(map(len, expected.values())), 90, settle_s=SETTLE_S
            )
            committed = await read_tallies(
                settings, "read_committed", calls_at_least=sum(expected_calls(log).values())
            )
            uncommitted = await read_tallies(settings, "read_uncommitted")
        finally:
            await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in workers))
    assert {run: by_run(got).get(run) for run in expected} == expected
    assert sum(calls(uncommitted).values()) > sum(calls(committed).values())
    assert calls(committed) == expected_calls(log)
