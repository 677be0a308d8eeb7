"""Expiry under clock skew on a real broker: one run written by two producers 7 hours apart and
its partition's bystanders are decided as replay decides them; only a run idle on the broker's
clock is forgotten."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings
from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.script import RunScript
from tests.waiting import until

pytestmark = pytest.mark.kafka

BASE, SKEW = 1_800_000_000.0, 7 * 3600.0
# Short enough to see a silent run expire within the test, long enough that a run sending every
# TICK_S is never idle that long on the broker's clock, even on a loaded machine.
IDLE_TIMEOUT_S, TICK_S, TICKS = 4.0, 0.5, 16


async def changelog_tombstones(settings: Settings) -> set[str]:
    """The run ids whose state the worker deleted (a null value in the changelog), as far as its
    committed transactions go now."""
    consumer = committed_reader({"bootstrap_servers": settings.bootstrap})
    await consumer.start()
    deleted: set[str] = set()
    try:
        tps = [TopicPartition(settings.changelog_topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await read_to_end(
            consumer,
            tps,
            lambda _, records: deleted.update(r.key.decode() for r in records if r.value is None),
        )
    finally:
        await consumer.stop()
    return deleted


def tick(script: RunScript, ts: float, repeat: bool) -> list[bytes]:
    """One round of `script` at its producer's clock `ts`: a call made before (the same query
    every round) or a new one, then its result."""
    n = len(script.events)
    script.ts = ts
    script.start_round()
    query = "same" if repeat else f"q{script.round}"
    script.call("search", {"q": query}, status="ok", result={"items": [query]})
    script.end_round()
    return script.lines()[n:]


async def test_two_producers_seven_hours_apart_in_one_run_change_no_decision_of_any_run():
    settings = fresh_settings(partitions=1)  # the skewed run and its bystanders share a partition
    worker = WorkerProcess(
        settings,
        "skew",
        env={"STALLWATCH_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S), "STALLWATCH_EXPIRY_INTERVAL_S": "0.1"},
    )
    skewed = RunScript("skewed", ts=BASE)
    bystanders = [RunScript(f"bystander-{i}", ts=BASE) for i in range(3)]
    silent = RunScript("silent", ts=BASE)
    sent: list[bytes] = []
    try:
        await wait_until_serving(settings)
        first = [line for s in (skewed, *bystanders, silent) for line in s.lines()]
        await produce(settings, first)
        sent += first
        for i in range(1, TICKS + 1):
            # The skewed run's rounds come from two producers in turn, one 7 hours ahead.
            lines = tick(skewed, BASE + 10 * i + (SKEW if i % 2 else 0.0), repeat=i % 3 == 0)
            for s in bystanders:
                lines += tick(s, BASE + 10 * i, repeat=i % 3 == 0)
            await produce(settings, lines)
            sent += lines
            await asyncio.sleep(TICK_S)  # the thing under test: broker time passing, a round a tick
        expected = by_run(replay_commands(sent))
        got = by_run(
            await collect(
                settings, settings.commands_topic, sum(map(len, expected.values())), 30, settle_s=SETTLE_S
            )
        )
        assert {run: got.get(run) for run in expected} == expected
        # Live runs are kept; the silent one is forgotten after the idle timeout of broker time.
        deleted = await until(
            lambda: changelog_tombstones(settings), 30, "the silent run's tombstone", interval_s=0.2
        )
        assert deleted == {"silent"}
    finally:
        worker.stop()
