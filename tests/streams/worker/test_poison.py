"""Every poison input on a real broker: a bounded dead letter or a bounded command, the worker alive,
every other run's commands equal to replay."""

from __future__ import annotations

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from stallwatch.contract.digests import derive_secret, digest
from stallwatch.contract.limits import DEADLETTER_RAW_BYTES
from tests.engine.test_keyed_digests import guessed_pin, poison_with_a_pin
from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    serving_worker,
    wait_until_serving,
)
from tests.script import RunScript
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka

# The producer's default limit: any record the worker derives from input must stay below it.
RECORD_LIMIT = 1_000_000
# Fields of a valid event, each filled to nearly the broker's limit.
HUGE = 900_000


def poison() -> list[tuple[bytes | None, bytes | None, str]]:
    """(key, value, what) of each message a hostile or broken runtime can send."""
    out: list[tuple[bytes | None, bytes | None, str]] = []
    out.append((b"p-utf8", b"\xff\xfe" * 125_000, "250 KB of invalid UTF-8"))
    out.append((b"p-tomb", None, "a tombstone"))
    valid = RunScript("p-nullkey").lines()[0]
    out.append((None, valid, "a valid event with a null key"))
    big_call = RunScript("p-callid")
    big_call.start_round()
    big_call.add("call_proposed", round=1, call_id="c" * HUGE, tool="search", args=None)
    out += [(b"p-callid", line, "a call_id of 900 KB") for line in big_call.lines()]
    big_tool = RunScript("p-tool")
    big_tool.start_round()
    big_tool.add("call_proposed", round=1, call_id="c1", tool="t" * HUGE, args=None)
    out += [(b"p-tool", line, "a tool name of 900 KB") for line in big_tool.lines()]
    declared = RunScript("p-decl", tools=[{"name": "n" * 350_000}])
    declared.start_round()
    declared.call("search", {"q": 1})
    out += [(b"p-decl", line, "a declared tool name of 350 KB") for line in declared.lines()]
    run_id = "r" * (HUGE // 3)  # the event id and the key repeat it: all in one record
    out.append((run_id.encode(), RunScript(run_id).lines()[0], "a run_id (and key) of 300 KB"))
    event_id = RunScript("p-eventid")
    event_id.events[0]["event_id"] = "e" * HUGE
    out += [(b"p-eventid", line, "an event_id of 900 KB") for line in event_id.lines()]
    deep: object = 1
    for _ in range(3_000):
        deep = [deep]
    nested = RunScript("p-deep")
    nested.start_round()
    nested.add("call_proposed", round=1, call_id="c1", tool="search", args=None)
    lines = nested.lines()
    lines[-1] = lines[-1][:-1] + b',"args":' + b"[" * 3_000 + b"1" + b"]" * 3_000 + b"}"
    out += [(b"p-deep", line, "args nested 3,000 deep") for line in lines]
    return out


async def test_poison_gets_bounded_answers_and_leaves_other_runs_untouched():
    healthy = interleave(mixed_fleet(30))
    bad = poison()
    async with serving_worker(partitions=2) as (settings, worker):
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap, acks="all", max_request_size=4 * RECORD_LIMIT
        )
        await producer.start()
        try:
            half = len(healthy) // 2
            for line in healthy[:half]:
                await producer.send(settings.events_topic, line, key=orjson.loads(line)["run_id"].encode())
            for key, value, _ in bad:
                await producer.send_and_wait(settings.events_topic, value, key=key, partition=0)
            for line in healthy[half:]:
                await producer.send(settings.events_topic, line, key=orjson.loads(line)["run_id"].encode())
            await producer.flush()
        finally:
            await producer.stop()
        expected = by_run(replay_commands(healthy))
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 60, settle_s=SETTLE_S
        )
        letters = await collect(settings, settings.deadletter_topic, 4, 10)
        # Commands go out ahead of their batch's commit: the worker lives on past every commit.
        await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= len(healthy))
        assert worker.alive(), worker.log_tail()
    runs = by_run(got)
    assert {run: runs.get(run) for run in expected} == expected
    assert max(map(len, got)) < RECORD_LIMIT // 10, "a command grew with its input"
    assert letters and max(map(len, letters)) < RECORD_LIMIT // 10, "a dead letter grew with its input"
    reasons = {orjson.loads(letter)["error"] for letter in letters}
    assert any("tombstone" in r for r in reasons), reasons
    assert any("no key" in r for r in reasons), reasons


async def test_a_run_of_100000_events_keeps_a_bounded_state_and_its_decisions():
    long_run = RunScript("long")
    long_run.start_round()
    for page in range(50_000):  # every call brings a new page: nothing to stop
        long_run.call("search", {"q": "x", "page": page}, status="ok", result={"docs": [page]})
    lines = long_run.lines()
    assert len(lines) > 100_000
    async with serving_worker(partitions=1) as (settings, worker):
        await produce(settings, lines)
        expected = replay_commands(lines)
        got = await collect(settings, settings.commands_topic, len(expected), 180, settle_s=SETTLE_S)
        changelog = await collect(settings, settings.changelog_topic, 10**9, 5)
        assert worker.alive(), worker.log_tail()
    assert by_run(got)["long"] == by_run(expected)["long"]
    assert max(map(len, changelog)) < RECORD_LIMIT // 4, "a long run's state grew with its events"


async def test_a_dead_letter_of_a_keyed_worker_keeps_a_pin_past_its_cut_secret():
    """The leak this guards against: with STALLWATCH_FINGERPRINT_KEY set, a reader of the dead-letter
    topic hashed every guess of a poison event's hidden tail against `raw_digest`."""
    key = "a fleet key of at least 16 characters"
    settings = fresh_settings()
    worker = WorkerProcess(
        settings, env={"STALLWATCH_FINGERPRINT_KEY": key, "STALLWATCH_DEADLETTER_RAW": "true"}
    )
    try:
        await wait_until_serving(settings)
        await produce(settings, [poison_with_a_pin("4821")], keys=[b"p-pin"])
        letters = [orjson.loads(x) for x in await collect(settings, settings.deadletter_topic, 1, 30)]
    finally:
        worker.stop()
    letter = next(x for x in letters if x["raw_size"] > DEADLETTER_RAW_BYTES)
    assert letter["raw_truncated"] and "4821" not in letter["raw"]
    assert guessed_pin(letter["raw_digest"]) is None
    # The key's holder still matches the letter with its record.
    assert letter["raw_digest"] == digest(poison_with_a_pin("4821"), derive_secret(key)).hex()
