"""Bad input becomes a specific error, never an exception that escapes."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.envelope import envelope
from stallwatch.contract.parse import InvalidEvent, parse_event

GOOD = envelope("call_proposed", "r1", "e1", 1.5, round=1, call_id="c1", tool="search", args={"q": "x"})


def error_of(raw: bytes) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as caught:
        parse_event(raw)
    return caught.value


@pytest.mark.parametrize(
    ("raw", "reason", "says"),
    [
        (b"not json", "malformed_json", "not JSON"),
        (b"[1, 2]", "not_an_object", "not an array"),
        (b'"text"', "not_an_object", "not a string"),
        (orjson.dumps({**GOOD, "v": 2}), "unsupported_version", "version 2"),
        (orjson.dumps({**GOOD, "v": True}), "unsupported_version", "version true"),
        # A string is described, never quoted: it may be anything the runtime had, a secret too.
        (orjson.dumps({**GOOD, "v": "1"}), "unsupported_version", "version (a string of 1 character)"),
        (orjson.dumps({k: v for k, v in GOOD.items() if k != "v"}), "unsupported_version", "version null"),
        (orjson.dumps({**GOOD, "type": "call_exploded"}), "unknown_type", "type (a string of 13 characters)"),
        (orjson.dumps({**GOOD, "type": ["sk-live-1234"]}), "unknown_type", "type (an array of 1 item)"),
        (orjson.dumps({**GOOD, "round": "1"}), "invalid_field", "`round`"),
        (orjson.dumps({**GOOD, "ts": "yesterday"}), "invalid_field", "`ts`"),
        (
            orjson.dumps({k: v for k, v in GOOD.items() if k != "tool"}),
            "invalid_field",
            "`tool`: Field required",
        ),
        (orjson.dumps({**GOOD, "event_id": ""}), "invalid_field", "`event_id`"),
        (b"[" * 3000 + b"]" * 3000, "too_deep", "deeper than 1024"),
        (orjson.dumps({**GOOD, "args": "x" * 5_000_000}), "too_large", "over the limit"),
    ],
)
def test_bad_input_gets_a_specific_error(raw, reason, says):
    err = error_of(raw)
    assert err.reason == reason
    assert says in str(err)


def test_a_call_result_with_a_fingerprint_needs_empty_beside_it():
    raw = orjson.dumps({**GOOD, "type": "call_result", "status": "ok", "fingerprint": "ab" * 16})
    assert "`empty`" in str(error_of(raw))


def test_bad_policy_values_are_rejected_by_field():
    raw = orjson.dumps(
        envelope("run_started", "r", "e", 0, mode="researcher", policy={"no_progress_threshold": 0})
    )
    assert "policy.no_progress_threshold" in str(error_of(raw))


def test_extra_fields_are_ignored_and_ints_are_taken_for_ts():
    event = parse_event(orjson.dumps({**GOOD, "ts": 2, "model": "x", "trace": {"id": 1}}))
    assert event["ts"] == 2 and event["tool"] == "search"


def test_a_result_present_as_null_differs_from_no_result():
    base = {**GOOD, "type": "call_result", "status": "ok"}
    assert "result" in parse_event(orjson.dumps({**base, "result": None}))
    assert "result" not in parse_event(orjson.dumps(base))


def test_run_started_is_validated_in_full():
    raw = envelope(
        "run_started",
        "r",
        "e",
        0,
        mode="chat",
        tools=[{"name": "wait", "repeat_exempt": True}],
        policy={"max_rounds": 9},
    )
    event = parse_event(orjson.dumps(raw))
    assert event["tools"][0]["repeat_exempt"] is True and event["policy"]["max_rounds"] == 9
    assert "`mode`: Input should be" in str(error_of(orjson.dumps({**raw, "mode": "bad"})))
