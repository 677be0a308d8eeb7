"""Redeliveries on a real broker: after run_ended's retention, after an idle
run expired and after 600 events, no command id carries two contents, in the commands topic or
in replay's output, and the first verdict of every call stays its answer."""

from __future__ import annotations

import orjson
import pytest

from tests.engine.test_redelivery import long_run
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
from tests.streams.worker.test_clock_skew import changelog_tombstones, tick
from tests.waiting import until

pytestmark = pytest.mark.kafka

BASE = 1_800_000_000.0
# Broker time: an ended run is forgotten after ENDED_S, an idle one after IDLE_S; the ticker
# run sends a round every TICK_S, which moves the partition's clock and keeps itself live.
ENDED_S, IDLE_S, TICK_S = 2.0, 4.0, 0.5


def first_call(script: RunScript) -> dict:
    return next(e for e in script.events if e["type"] == "call_proposed")


async def test_redeliveries_after_expiry_and_beyond_the_window_never_reuse_an_id():
    settings = fresh_settings(partitions=1)  # every run on one partition, one clock
    worker = WorkerProcess(
        settings,
        "redeliver",
        env={
            "STALLWATCH_IDLE_TIMEOUT_S": str(IDLE_S),
            "STALLWATCH_ENDED_RETENTION_S": str(ENDED_S),
            "STALLWATCH_EXPIRY_INTERVAL_S": "0.1",
        },
    )
    ended, idle, ticker = (
        RunScript("ended", ts=BASE),
        RunScript("idle", ts=BASE),
        RunScript("ticker", ts=BASE),
    )
    ended.round_of(("search", {"q": 1}, {"documents": [{"id": 1}]}))
    ended.end()
    idle.start_round()
    idle.call("search", {"q": 1})
    long = long_run(28, run_id="long", ts=BASE)  # 617 events, past the 512-id window
    long.start_round()
    long.call("search", {"q": "new"})
    sent = [*ended.lines(), *idle.lines(), *ticker.lines()]
    try:
        await wait_until_serving(settings)
        await produce(settings, sent)
        # Broker time passes on the partition, a round every TICK_S, until both runs are forgotten.
        ticks = 0

        async def ticked_till_forgotten() -> bool:
            nonlocal ticks
            lines = tick(ticker, BASE + ticks, repeat=False)
            ticks += 1
            await produce(settings, lines)
            sent.extend(lines)
            return {"ended", "idle"} <= await changelog_tombstones(settings)

        await until(ticked_till_forgotten, 60, "the ended and the idle runs' tombstones", interval_s=TICK_S)
        n = len(long.events)
        long.events.append(dict(first_call(long)))  # round 1's call, 600 events later
        long.call("search", {"q": "newer"})
        redelivered = [orjson.dumps(first_call(ended)), orjson.dumps(first_call(idle)), *long.lines()]
        assert len(long.lines()) - n == 2 and n > 600
        await produce(settings, redelivered)
        sent += redelivered
        expected = by_run(replay_commands(sent))  # fails if replay gave one id two contents
        got = by_run(
            await collect(
                settings, settings.commands_topic, sum(map(len, expected.values())), 30, settle_s=SETTLE_S
            )
        )  # fails alike
    finally:
        worker.stop()
    # The window and the closed round: the worker answers as replay does, no second verdict.
    assert got["long"] == expected["long"] and got["ticker"] == expected["ticker"]
    answers = [orjson.loads(c) for c in got["long"] if b'"caused_by":"long/2"' in c]
    assert [(c["call_id"], c["decision"]) for c in answers] == [("c1", "allow")]
    # After expiry the worker has no record: the call is allowed again, under an id of its own,
    # after the original verdict (replay, which forgets nothing, recognises the redelivery).
    for run in ("ended", "idle"):
        assert got[run][: len(expected[run])] == expected[run]
        verdicts = [orjson.loads(c) for c in got[run] if b'"call_id":"c1"' in c]
        assert [v["decision"] for v in verdicts] == ["allow", "allow"]
        assert verdicts[0]["command_id"] != verdicts[1]["command_id"]
        assert "no record" in verdicts[1]["reason"]
