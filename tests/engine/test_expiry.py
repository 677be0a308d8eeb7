"""Expiry on event time only: a run's own last event on its partition's clock, skew included."""

from __future__ import annotations

import orjson

from stallwatch.contract.parse import parse_event
from stallwatch.engine.expiry import PartitionClock, is_expired
from stallwatch.engine.fleet import Fleet
from tests.script import RunScript

IDLE, ENDED = 6 * 3600.0, 600.0
NOW = 1_800_000_000.0
SEVEN_HOURS = 7 * 3600.0


class Partition:
    """What a worker does per partition: apply each event, then observe its run on the clock."""

    def __init__(self) -> None:
        self.fleet, self.clock = Fleet(), PartitionClock()

    def apply(self, event: dict) -> None:
        self.fleet.handle(parse_event(orjson.dumps(event)))
        self.clock.observe(self.fleet.runs[event["run_id"]])

    def expired(self, run_id: str) -> bool:
        return is_expired(self.fleet.runs[run_id], self.clock.newest, IDLE, ENDED)


def steady_runs(p: Partition, scripts: list[RunScript], seconds: float, step: float = 60.0) -> None:
    """Every script sends a round every `step` seconds of its own clock, for `seconds`."""
    starts = [s.ts for s in scripts]
    for i in range(1, int(seconds / step) + 1):
        for s, start in zip(scripts, starts, strict=True):
            n = len(s.events)
            s.ts = start + i * step
            s.round_of(("search", {"q": len(s.events)}, {"n": len(s.events)}))
            for event in s.events[n:]:
                p.apply(event)


def test_a_run_seven_hours_behind_is_not_expired_while_it_is_active():
    p = Partition()
    normal, behind = RunScript("normal", ts=NOW), RunScript("behind", ts=NOW - SEVEN_HOURS)
    for s in (normal, behind):
        p.apply(s.events[0])
    steady_runs(p, [normal, behind], seconds=3600)
    assert not p.expired("behind") and not p.expired("normal")


def test_a_run_seven_hours_ahead_does_not_expire_the_others():
    p = Partition()
    normal, ahead = RunScript("normal", ts=NOW), RunScript("ahead", ts=NOW + SEVEN_HOURS)
    for s in (normal, ahead):
        p.apply(s.events[0])
    steady_runs(p, [normal, ahead], seconds=3600)
    assert not p.expired("normal") and not p.expired("ahead")


def test_an_idle_run_expires_after_the_idle_timeout_of_the_others_event_time():
    p = Partition()
    idle, busy = RunScript("idle", ts=NOW - SEVEN_HOURS), RunScript("busy", ts=NOW)
    for s in (idle, busy):
        p.apply(s.events[0])
    steady_runs(p, [busy], seconds=IDLE - 120)
    assert not p.expired("idle")
    steady_runs(p, [busy], seconds=240)
    assert p.expired("idle") and not p.expired("busy")


def test_an_ended_run_expires_after_the_retention_not_the_idle_timeout():
    p = Partition()
    ended, busy = RunScript("ended", ts=NOW + 100), RunScript("busy", ts=NOW)
    for s in (ended, busy):
        p.apply(s.events[0])
    ended.end()
    p.apply(ended.events[-1])
    steady_runs(p, [busy], seconds=ENDED - 60)
    assert not p.expired("ended")
    steady_runs(p, [busy], seconds=120)
    assert p.expired("ended") and not p.expired("busy")


def test_the_wall_clock_plays_no_part():
    """A log from years ago expires exactly as it would today: only event times count."""
    p = Partition()
    old = RunScript("old", ts=1_000.0)
    p.apply(old.events[0])
    assert not p.expired("old")
    assert is_expired(p.fleet.runs["old"], 1_000.0 + IDLE + 1, IDLE, ENDED)
    assert not is_expired(p.fleet.runs["old"], 1_000.0 + IDLE - 1, IDLE, ENDED)


def test_a_restored_state_keeps_its_place_on_a_new_clock():
    """After a worker restart the clock is rebuilt by observing the restored states."""
    p = Partition()
    normal, behind = RunScript("normal", ts=NOW), RunScript("behind", ts=NOW - SEVEN_HOURS)
    for s in (normal, behind):
        p.apply(s.events[0])
    steady_runs(p, [normal, behind], seconds=600)
    restored = {k: type(v).from_bytes(v.to_bytes()) for k, v in p.fleet.runs.items()}
    clock = PartitionClock()
    for state in restored.values():
        clock.observe(state)
    assert clock.newest == p.clock.newest
    assert not is_expired(restored["behind"], clock.newest, IDLE, ENDED)
