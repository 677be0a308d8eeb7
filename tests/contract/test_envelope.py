"""The envelope builder gives events the parser accepts, with fresh ids unless given its own."""

from __future__ import annotations

import orjson

from stallwatch.contract.envelope import envelope
from stallwatch.contract.parse import parse_event


def test_an_envelope_is_a_valid_event_with_a_fresh_id_and_the_time():
    first = envelope("round_started", "r1", round=1)
    second = envelope("round_started", "r1", round=1)
    assert first["event_id"] != second["event_id"] and first["ts"] > 1.6e9
    assert parse_event(orjson.dumps(first)) == first


def test_given_ids_and_times_are_kept_so_logs_replay_the_same():
    event = envelope("run_ended", "r1", "e-7", 12.5, reason="done")
    assert event == {
        "v": 1,
        "type": "run_ended",
        "event_id": "e-7",
        "run_id": "r1",
        "ts": 12.5,
        "reason": "done",
    }
