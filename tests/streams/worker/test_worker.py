"""The worker on a real Apache Kafka broker: every rule, parity with replay, bad input."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.envelope import envelope
from tests.kafka_harness import SETTLE_S, by_run, collect, produce, replay_commands, serving_worker
from tests.streams.worker.fleet_logs import every_rule, interleave

pytestmark = pytest.mark.kafka


async def test_every_rule_end_to_end_equals_replay():
    async with serving_worker() as (settings, worker):
        log = interleave(every_rule())
        expected = replay_commands(log)
        await produce(settings, log)
        got = await collect(settings, settings.commands_topic, len(expected), 60, settle_s=SETTLE_S)
        runs = by_run(got)
        assert {run: runs.get(run) for run in by_run(expected)} == by_run(expected)
        stops = {
            orjson.loads(c)["run_id"]: orjson.loads(c)["code"]
            for c in got
            if orjson.loads(c)["type"] == "stop"
        }
        assert stops == {
            "looper": "no_new_facts",
            "duplicate": "all_refused",
            "failing": "tool_failures",
            "budget": "call_budget",
            "limit": "round_limit",
            "timed": "time_limit",
            "chat": "tool_failures",
        }
        assert worker.alive()


async def test_a_burst_of_garbage_is_dead_lettered_and_other_runs_are_untouched():
    async with serving_worker() as (settings, worker):
        good = interleave(every_rule())
        garbage = [b"garbage %d" % i for i in range(150)] + [
            b'{"v": 2, "type": "round_started"}',
            b"\xff\xfe\x00 binary",
            b'{"v":1,"type":"call_result","result":' + b"[" * 3000 + b"]" * 3000 + b"}",
            orjson.dumps(envelope("call_proposed", "pager", "x", 1, round="one", call_id="c", tool="t")),
            # keyed by another run: refused, not misfiled
            orjson.dumps(envelope("round_started", "other", "x", 1, round=1)),
        ]
        log, keys = [], []
        for i, line in enumerate(good):
            log.append(line)
            keys.append(orjson.loads(line)["run_id"].encode())
            if i < len(garbage):
                log.append(garbage[i])
                keys.append(b"pager")
        await produce(settings, log, keys)
        expected = replay_commands(good)
        got = await collect(settings, settings.commands_topic, len(expected), 60, settle_s=SETTLE_S)
        assert {run: by_run(got).get(run) for run in by_run(expected)} == by_run(expected)
        letters = [
            orjson.loads(x) for x in await collect(settings, settings.deadletter_topic, len(garbage), 60)
        ]
        assert len(letters) == len(garbage)
        assert all(x["topic"] == settings.events_topic and x["error"] for x in letters)
        errors = " ".join(x["error"] for x in letters)
        for phrase in (
            "not JSON",
            "unsupported contract version 2",
            "deeper than 1024",
            "`round`",
            "is not the event's run_id",
        ):
            assert phrase in errors
        assert worker.alive()
