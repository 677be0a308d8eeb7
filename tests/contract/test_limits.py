"""Every input gets a bounded output: dead letters, verdicts and stops stay far below the
producer's limit whatever came in (one oversized record refused by the producer would stop every worker)."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.commands import DeadLetter, encode_command
from stallwatch.contract.limits import (
    DEADLETTER_RAW_BYTES,
    MAX_ID_CHARS,
    MAX_RECORD_BYTES,
    bounded_id,
    bounded_key,
)
from stallwatch.contract.parse import InvalidEvent, parse_event, parse_record
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.state import RunState


def event(kind: str, **fields) -> bytes:
    return orjson.dumps({"v": 1, "type": kind, "event_id": "e1", "run_id": "r", "ts": 1.0, **fields})


def reason_of(raw: bytes | None, key: bytes | None = b"r") -> InvalidEvent:
    with pytest.raises(InvalidEvent) as caught:
        parse_record(key, raw)
    return caught.value


def test_a_dead_letter_of_invalid_utf8_is_cut_and_marked():
    raw = b"\xff\xfe" * 125_000  # 250 KB that grows ~5x once escaped as JSON text
    letter = DeadLetter.of(raw, "not JSON", "stallwatch.events", 3, 17, keep_raw=True)
    encoded = letter.encode()
    assert len(encoded) < 6 * DEADLETTER_RAW_BYTES < MAX_RECORD_BYTES
    assert letter.raw_truncated and letter.raw_size == len(raw)
    assert letter.raw_digest == DeadLetter.of(raw, "other", "t", 0, 0).raw_digest
    assert letter.raw_digest != DeadLetter.of(raw[:-1], "x", "t", 0, 0).raw_digest
    assert letter.raw.startswith("\\xff\\xfe")


def test_a_small_dead_letter_keeps_its_raw_input_whole():
    letter = DeadLetter.of(b'{"v": 2}', "unsupported", "t", 0, 5, keep_raw=True)
    assert (letter.raw, letter.raw_truncated, letter.raw_size) == ('{"v": 2}', False, 8)
    assert letter.raw_kept


def test_a_dead_letter_keeps_no_raw_input_unless_asked():
    letter = DeadLetter.of(b'{"v": 2, "key": "sk-123"}', "unsupported", "t", 0, 5)
    assert (letter.raw, letter.raw_kept, letter.raw_truncated, letter.raw_size) == ("", False, False, 25)
    assert (
        letter.raw_digest
        == DeadLetter.of(b'{"v": 2, "key": "sk-123"}', "x", "t", 0, 5, keep_raw=True).raw_digest
    )


def test_a_record_keyed_by_its_run_id_is_parsed():
    assert parse_record(b"r", event("round_started", round=1))["round"] == 1


def test_a_tombstone_and_a_null_key_are_dead_letters_with_their_own_reasons():
    assert reason_of(None).reason == "null_value"
    assert reason_of(event("round_started", round=1), key=None).reason == "null_key"
    letter = DeadLetter.of(None, "null", "t", 0, 1)
    assert (letter.raw, letter.raw_size, letter.raw_digest) == ("", 0, None)


def test_a_key_that_is_not_the_run_id_is_refused_with_a_short_message():
    error = reason_of(event("round_started", round=1), key=b"k" * 900_000)
    assert error.reason == "key_mismatch" and len(str(error)) < 300
    assert len(bounded_key(b"k" * 900_000)) <= MAX_ID_CHARS and bounded_key(b"short") == b"short"


def test_an_error_quoting_a_huge_input_is_cut():
    error = reason_of(orjson.dumps({"v": 1, "type": "x" * 900_000}))
    assert error.reason == "unknown_type" and len(str(error)) < 300
    letter = DeadLetter.of(b"x", "e" * 50_000, "t", 0, 0)
    assert len(letter.error) < 2_100


def test_a_huge_call_id_and_tool_get_a_small_verdict_the_client_can_match():
    call_id, tool = "c" * 700_000, "t" * 50_000
    fleet = EmbeddedEngine()
    fleet.handle(parse_event(event("run_started", mode="researcher")))
    fleet.handle(
        parse_event(
            orjson.dumps(
                {"v": 1, "type": "round_started", "event_id": "e2", "run_id": "r", "ts": 1.0, "round": 1}
            )
        )
    )
    verdicts = []
    for n in range(2):
        raw = orjson.dumps(
            {
                "v": 1,
                "type": "call_proposed",
                "event_id": f"p{n}" * 50_000,
                "run_id": "r",
                "ts": 2.0,
                "round": 1,
                "call_id": call_id,
                "tool": tool,
                "args": {"q": 1},
            }
        )
        verdicts += fleet.handle(parse_event(raw))
    assert [v.decision for v in verdicts] == ["allow", "refuse"]  # the long tool is still compared
    for verdict in verdicts:
        assert verdict.call_id == bounded_id(call_id) and verdict.tool == bounded_id(tool)
        assert len(encode_command(verdict)) < 2_000
    assert "…#" in verdicts[0].call_id and len(fleet.runs["r"].to_bytes()) < 10_000


def test_a_run_id_too_long_for_a_key_is_refused():
    assert (
        reason_of(
            event("round_started", round=1).replace(b'"r"', b'"' + b"r" * 300 + b'"'), key=b"r" * 300
        ).reason
        == "id_too_long"
    )


def test_a_bounded_id_is_stable_and_never_changes_a_short_one():
    long = "x" * (MAX_ID_CHARS + 1)
    assert bounded_id("call-1") == "call-1" and bounded_id(long) == bounded_id(long)
    assert bounded_id(bounded_id(long)) == bounded_id(long)
    assert bounded_id(long) != bounded_id(long + "y")


def test_a_declared_name_too_long_to_copy_is_bounded_as_its_calls_tool_is():
    exempt, plain = "w" * 350_000, "t" * (MAX_ID_CHARS + 1)
    fleet = EmbeddedEngine()
    started = parse_event(
        event(
            "run_started", mode="researcher", tools=[{"name": exempt, "repeat_exempt": True}, {"name": plain}]
        )
    )
    assert [t["name"] for t in started["tools"]] == [bounded_id(exempt), bounded_id(plain)]
    fleet.handle(started)
    decisions: dict[str, list[str]] = {exempt: [], plain: []}
    for number, tool in enumerate([exempt, exempt, plain, plain], start=1):
        fleet.handle(parse_event(event("round_started", round=number, event_id=f"r{number}")))
        raw = event(
            "call_proposed",
            event_id=f"p{number}",
            round=number,
            call_id=f"c{number}",
            tool=tool,
            args={"q": 1},
        )
        verdicts = [c for c in fleet.handle(parse_event(raw)) if c.type == "verdict"]
        decisions[tool].append(verdicts[0].decision)
    # The declaration matches the call: the exempt wait repeats, the plain tool's repeat is refused.
    assert decisions == {exempt: ["allow", "allow"], plain: ["allow", "refuse"]}


@pytest.mark.parametrize(
    "tools",
    [
        [{"name": f"{i:03}" + "n" * 200} for i in range(400)],  # bounded, still over the limit
        [{"name": f"tool{i}", "volatile_fields": [f"meta.field_{j}" for j in range(30)]} for i in range(100)],
    ],
)
def test_a_run_started_with_oversized_declarations_is_refused_with_a_clear_error(tools):
    error = reason_of(event("run_started", mode="researcher", tools=tools))
    assert error.reason == "declarations_too_large" and "over the limit" in str(error)
    assert len(str(error)) < 300


def test_the_largest_declarations_accepted_make_a_small_state():
    tools = [
        {
            "name": f"{i:03}" + "n" * (MAX_ID_CHARS - 3),
            "repeat_exempt": True,
            "requires_approval": True,
            "volatile_fields": ["a.b"],
        }
        for i in range(60)
    ]
    fleet = EmbeddedEngine()
    fleet.handle(parse_event(event("run_started", mode="researcher", tools=tools)))
    state = fleet.runs["r"]
    assert len(state.to_bytes()) < MAX_RECORD_BYTES / 4
    assert RunState.from_bytes(state.to_bytes()) == state
