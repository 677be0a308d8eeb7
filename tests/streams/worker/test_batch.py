"""The pure step of the worker: messages of one partition to commands, dead letters and states."""

from __future__ import annotations

import orjson

from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from tests.script import RunScript

BROKER_MS = 1_800_000_000_000  # the broker's append time of a test batch's first record


def messages(script: RunScript, first_offset: int = 0) -> list[SourceMessage]:
    key = script.run_id.encode()
    return [
        SourceMessage(key, line, 0, first_offset + i, timestamp=BROKER_MS + i)
        for i, line in enumerate(script.lines())
    ]


def test_a_batch_gives_the_commands_and_the_states_it_touched():
    script = RunScript("r1")
    script.start_round()
    script.call("search", {"q": 1})
    script.call("search", {"q": 1})
    clock = PartitionClock()
    result = BatchApplier(Detector(), "events").apply(messages(script), lambda run_id: None, clock, 0.0)
    assert [c.decision for c in result.commands] == ["allow", "refuse"]
    assert result.caused_at == [script.events[2]["ts"], script.events[3]["ts"]]
    assert result.states["r1"].last_offset == 3
    assert clock.newest == (BROKER_MS + 3) / 1000  # the broker's time, not the events' ts
    assert result.states["r1"].seen_at == clock.newest
    assert result.events_by_type == {"run_started": 1, "round_started": 1, "call_proposed": 2}


def test_tombstones_null_keys_and_misfiled_events_become_specific_dead_letters():
    valid = RunScript("r1").lines()[0]
    batch = [
        SourceMessage(b"r1", None, 0, 0),
        SourceMessage(None, valid, 0, 1),
        SourceMessage(b"r2", valid, 0, 2),
        SourceMessage(b"r1", b"{", 0, 3),
    ]
    result = BatchApplier(Detector(), "events").apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    reasons = [reason for _, _, reason in result.letters]
    assert reasons[:3] == ["null_value", "null_key", "key_mismatch"]
    assert len(reasons) == 4
    letters = [orjson.loads(letter) for _, letter, _ in result.letters]
    assert "tombstone" in letters[0]["error"] and "no key" in letters[1]["error"]
    assert [letter["offset"] for letter in letters] == [0, 1, 2, 3]
    assert not result.commands and not result.states


def test_events_at_or_below_a_states_last_offset_are_skipped():
    script = RunScript("r1")
    script.start_round()
    script.call("search", {"q": 1})
    script.call("search", {"q": 2})
    stored = RunState(mode="researcher", started_ts=0.0, last_offset=2)
    result = BatchApplier(Detector(), "events").apply(
        messages(script), lambda run_id: stored, PartitionClock(), 0.0
    )
    assert result.skipped == 3
    assert [c.call_id for c in result.commands] == ["c2"]  # only offset 3 was applied
    assert stored.last_offset == 3


def test_records_the_producer_stamped_are_timed_by_the_worker_on_receipt():
    script = RunScript("r1", ts=1_800_000_000.0 + 7 * 3600)  # a producer 7 hours ahead
    batch = [
        SourceMessage(m.key, m.value, 0, m.offset, timestamp=int(script.ts * 1000), timestamp_type=0)
        for m in messages(script)
    ]
    clock = PartitionClock()
    result = BatchApplier(Detector(), "events").apply(batch, lambda run_id: None, clock, 42.0)
    assert clock.newest == result.states["r1"].seen_at == 42.0
