"""Expiry on the broker's clock only: a run's last append time against its partition's newest,
whatever the producers' clocks say."""

from __future__ import annotations

import orjson

from stallwatch.contract.parse import parse_event
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.expiry import PartitionClock, is_expired
from stallwatch.engine.state import RunState
from tests.engine.test_fleet_advisory import advisory
from tests.script import RunScript

IDLE, ENDED = 6 * 3600.0, 600.0
NOW = 1_800_000_000.0
SEVEN_HOURS = 7 * 3600.0


class Partition:
    """What a worker does per partition: apply each event, then touch its run with the time the
    broker appended it (`broker`, advancing a second per event)."""

    def __init__(self) -> None:
        self.engine, self.clock, self.broker = EmbeddedEngine(), PartitionClock(), NOW

    def apply(self, event: dict) -> None:
        self.broker += 1.0
        self.engine.handle(parse_event(orjson.dumps(event)))
        state = self.engine.runs.get(event["run_id"])
        if state is not None:
            self.clock.touch(state, event["type"], self.broker)
        else:
            self.clock.advance(self.broker)

    def expired(self, run_id: str) -> bool:
        return is_expired(self.engine.runs[run_id], self.clock.newest, IDLE, ENDED)


def rounds(p: Partition, scripts: list[RunScript], count: int, ts_step: float = 60.0) -> None:
    """Each script sends `count` rounds, its own clock moving `ts_step` a round."""
    for _ in range(count):
        for s in scripts:
            n = len(s.events)
            s.ts += ts_step
            s.round_of(("search", {"q": len(s.events)}, {"n": len(s.events)}))
            for event in s.events[n:]:
                p.apply(event)


def test_one_run_written_by_two_producers_seven_hours_apart_expires_nothing_live():
    p = Partition()
    skewed, bystander = RunScript("skewed", ts=NOW), RunScript("bystander", ts=NOW)
    for s in (skewed, bystander):
        p.apply(s.events[0])
    ahead = RunScript("skewed", ts=NOW + SEVEN_HOURS)  # the same run, from a second producer
    ahead.events.clear()
    for _ in range(20):
        rounds(p, [skewed, bystander], 1)
        ahead.ts, ahead.round = ahead.ts + 60, skewed.round
        rounds(p, [ahead], 1)
        skewed.round = ahead.round
    assert not p.expired("skewed") and not p.expired("bystander")


def test_an_events_ts_never_moves_the_clock():
    p = Partition()
    far = RunScript("far", ts=NOW + 10 * SEVEN_HOURS)
    p.apply(far.events[0])
    assert p.clock.newest == p.broker


def test_an_idle_run_expires_after_the_idle_timeout_of_broker_time():
    p = Partition()
    idle, busy = RunScript("idle", ts=NOW), RunScript("busy", ts=NOW)
    for s in (idle, busy):
        p.apply(s.events[0])
    p.broker += IDLE - 120  # the broker appends busy's events hours later
    rounds(p, [busy], 1)
    assert not p.expired("idle")
    p.broker += 240
    rounds(p, [busy], 1)
    assert p.expired("idle") and not p.expired("busy")


def test_an_ended_run_expires_after_the_retention_not_the_idle_timeout():
    p = Partition()
    ended, busy = RunScript("ended", ts=NOW), RunScript("busy", ts=NOW)
    for s in (ended, busy):
        p.apply(s.events[0])
    ended.end()
    p.apply(ended.events[-1])
    p.broker += ENDED - 60
    rounds(p, [busy], 1)
    assert not p.expired("ended")
    p.broker += 120
    rounds(p, [busy], 1)
    assert p.expired("ended") and not p.expired("busy")


def test_a_fleet_advisory_is_no_activity_of_its_run():
    p = Partition()
    run = RunScript("run", ts=NOW)
    p.apply(run.events[0])
    seen = p.engine.runs["run"].seen_at
    p.broker += 100.0
    p.apply(advisory("run"))
    assert p.engine.runs["run"].seen_at == seen
    assert p.clock.newest == p.broker


def test_a_restored_state_keeps_its_broker_time_and_moves_a_new_clock():
    p = Partition()
    run = RunScript("run", ts=NOW - SEVEN_HOURS)
    p.apply(run.events[0])
    rounds(p, [run], 5)
    restored = RunState.from_bytes(p.engine.runs["run"].to_bytes())
    clock = PartitionClock()
    clock.observe(restored)
    assert restored.seen_at == clock.newest == p.clock.newest


def test_a_state_without_broker_time_is_placed_at_the_clock_never_expired_at_once():
    old = RunState(mode="researcher", started_ts=0.0, last_ts=0.0)
    clock = PartitionClock()
    clock.advance(NOW)
    assert not is_expired(old, NOW + 10 * IDLE, IDLE, ENDED)
    clock.place(old)
    assert old.seen_at == NOW
    assert not is_expired(old, NOW + IDLE - 1, IDLE, ENDED) and is_expired(old, NOW + IDLE + 1, IDLE, ENDED)
