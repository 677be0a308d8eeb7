"""Stored formats across releases without a broker: the position record, run states this version
cannot read (rebuilt or quarantined, never dropped in silence) and the fleet table's values."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.quota import RunQuota
from stallwatch.engine.state import STATE_FORMAT, RunState, UnreadableState, stored_format
from stallwatch_streams.fleet.window import WINDOW_FORMAT, new_state, readable
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.store import PartitionStates, decode_position, encode_position
from tests.script import RunScript

BROKER_MS = 1_800_000_000_000
QUOTA = RunQuota(1_000, 1_000)


def later_format(state: RunState) -> bytes:
    """The state as a later release might store it: a format number this one does not know."""
    values = orjson.loads(state.to_bytes())
    values[0] = STATE_FORMAT + 1
    return orjson.dumps(values)


def test_the_position_is_written_as_the_previous_release_reads_it_and_read_with_a_later_releases_additions():
    assert encode_position(42, 1.5) == b"[42,1.5]"  # format 1, the previous release's
    assert decode_position(b"[42,1.5]") == (42, 1.5)
    assert decode_position(b"42") == (42, None)  # format 0
    assert decode_position(b'[42,1.5,2,{"more":1}]') == (42, 1.5)  # a later release's additions


@pytest.mark.parametrize("value", [b'{"offset":1}', b"[]", b'["1",2.0]', b"[1]", b"x", b"[1,null]"])
def test_a_position_of_any_other_shape_is_refused(value):
    with pytest.raises((ValueError, IndexError)):
        decode_position(value)


def test_a_states_format_is_read_from_its_first_bytes():
    state = RunState(mode="researcher", started_ts=1.0)
    assert stored_format(state.to_bytes()) == STATE_FORMAT - 1  # a run not observe-only: format 5
    assert stored_format(later_format(state)) == STATE_FORMAT + 1
    assert stored_format(b'{"mode":"researcher"}') is None and stored_format(b"[") is None


@pytest.mark.parametrize("raw", [b"[99,1,2]", b'["5",1]', b"[[5],1]", b"{}", b"[]"])
def test_a_state_in_no_format_this_version_reads_raises_unreadable_state(raw):
    with pytest.raises(UnreadableState, match="this version reads formats 3, 4, 5, 6"):
        RunState.from_bytes(raw)


def test_unreadable_states_are_set_apart_at_restore_and_left_out_of_the_expiry_scan():
    readable_state = RunState(mode="researcher", started_ts=1.0, seen_at=5.0)
    states = PartitionStates(
        {"old": readable_state.to_bytes(), "new": later_format(readable_state), "junk": b"{}"},
        position=9,
        quota=QUOTA,
    )
    assert states.unreadable == {"new": STATE_FORMAT + 1, "junk": None}
    assert [run_id for run_id, _ in states.states()] == ["old"]
    assert len(states) == 3
    assert states.live is not None and states.live.total == 3  # counted live: never a free place


def test_a_rebuilt_run_replaces_its_unreadable_state_and_its_place_moves_to_its_tenant():
    stored = RunState(mode="researcher", started_ts=1.0)
    states = PartitionStates({"r1": later_format(stored)}, position=9, quota=QUOTA)
    live = states.live
    assert live is not None and live.by_tenant == {None: 1}
    states.replace_unreadable("r1", RunState(mode="researcher", started_ts=1.0, tenant="acme", seen_at=7.0))
    assert states.unreadable == {} and live.by_tenant == {"acme": 1}
    assert states.load("r1") is not None and states.clock.newest == 7.0


def test_an_unreadable_run_met_again_is_quarantined_once_with_a_state_format_dead_letter():
    script = RunScript("r1")
    script.start_round()
    stored = RunState(mode="researcher", started_ts=1.0)
    states = PartitionStates({"r1": later_format(stored)}, position=0, quota=QUOTA)
    script.call("search", {"q": 1})
    second = script.call("search", {"q": 1})
    events = script.events[-2:]
    messages = [
        SourceMessage(b"r1", orjson.dumps(event), 0, 10 + i, timestamp=BROKER_MS + i)
        for i, event in enumerate(events)
    ]
    applier = BatchApplier(Detector(), "events")
    result = applier.apply(messages[:1], states.load, PartitionClock(), 0.0, live=states.live)
    assert [reason for _, _, reason in result.letters] == ["state_format"]
    letter = orjson.loads(result.letters[0][1])
    assert f"format {STATE_FORMAT + 1}" in letter["error"] and "quarantined" in letter["error"]
    held = result.states["r1"]
    assert held.quarantined and held.last_offset == 10
    # Stored readable from now on: its next call is allowed as a quarantined run's, no more letters.
    again = applier.apply(
        messages[1:], lambda run_id: RunState.from_bytes(held.to_bytes()), PartitionClock(), 0.0
    )
    assert not again.letters
    assert [(c.call_id, c.decision) for c in again.commands] == [(second, "allow")]
    assert states.live is not None and states.live.total == 1  # its place, counted once


def test_a_quarantined_unreadable_run_that_ends_frees_its_place():
    script = RunScript("r1")
    script.end()
    states = PartitionStates(
        {"r1": later_format(RunState(mode="researcher", started_ts=1.0))}, position=0, quota=QUOTA
    )
    message = SourceMessage(b"r1", orjson.dumps(script.events[-1]), 0, 5, timestamp=BROKER_MS)
    result = BatchApplier(Detector(), "events").apply(
        [message], states.load, PartitionClock(), 0.0, live=states.live
    )
    assert result.states["r1"].ended and states.live is not None and states.live.total == 0


def test_the_fleet_table_reads_the_previous_releases_values_and_drops_a_later_format():
    value = new_state("acme", "search")
    assert value["format"] == WINDOW_FORMAT and readable(value)
    previous = {k: v for k, v in value.items() if k != "format"}  # as the previous release wrote it
    assert readable(previous)
    assert not readable({**value, "format": WINDOW_FORMAT + 1})
    assert not readable(["not", "a", "window"]) and not readable({"format": 1})


def test_a_restore_counts_the_fingerprints_held_and_the_live_runs_without_ended_ones():
    live = RunState(mode="researcher", started_ts=1.0)
    for i in range(5):
        live.add_fingerprint(bytes([i]) * 16)
    ended = RunState(mode="researcher", started_ts=1.0)
    ended.add_fingerprint(b"x" * 16)
    ended.release()
    states = PartitionStates(
        {"live": live.to_bytes(), "ended": ended.to_bytes(), "other": later_format(live)},
        position=3,
        quota=QUOTA,
    )
    assert states.restored_fingerprints == 5
    assert states.live is not None and states.live.total == 2  # the ended run holds no place
    assert RunState.summary(live.to_bytes()) == (None, False, 5)
