"""The stop-code registry: every code's words read its detail, and every stop carries its keys."""

from __future__ import annotations

from typing import get_args

import pytest

from stallwatch.contract.commands import COMMAND_ADAPTER
from stallwatch.contract.stop_codes import ANSWER, STOP_CODES, STOPS, StopAction, StopCode, stop_words
from stallwatch.engine.embedded import EmbeddedEngine
from tests.engine.conftest import Outcome
from tests.script import RunScript


def stops_of_every_code() -> list:
    """One run per stop code, each stopped by the rule the code names."""
    seen = RunScript("seen")
    for i in range(6):
        seen.round_of(("search", {"q": i}, {"same": 1}))
    refused = RunScript("refused")
    refused.round_of(("search", {"q": 0}, {"n": 1}))
    for _ in range(6):
        refused.start_round()
        refused.call("search", {"q": 0})
        refused.end_round()
    failing = RunScript("failing")
    for i in range(6):
        failing.start_round()
        failing.call("search", {"q": i}, status="error", result={"e": 1})
        failing.end_round()
    limited = RunScript("limited", policy={"max_rounds": 2})
    budget = RunScript("budget", policy={"call_budget": 2})
    for script in (limited, budget):
        for i in range(3):
            script.round_of(("search", {"q": i}, {"n": i}), ("search", {"q": -i - 1}, {"n": -i}))
    late = RunScript("late", policy={"time_limit_s": 5})
    late.round_of(("search", {"q": 1}, {"n": 1}))
    late.ts += 10
    late.start_round()
    stalled = RunScript("stalled", "coder", tools=[{"name": "bash"}], policy={"stall_stop_at": 3})
    for i in range(4):
        stalled.round_of(
            ("bash", {"command": f"sed -i s/{i}/x/ a.py"}, ""), ("bash", {"command": "pytest"}, "1 failed")
        )
    fleet = EmbeddedEngine()
    return [
        c
        for s in (seen, refused, failing, limited, budget, late, stalled)
        for c in Outcome(fleet, s).commands
        if c.type == "stop"
    ]


def test_every_code_the_engine_stops_with_is_registered_and_carries_its_detail_keys():
    stops = stops_of_every_code()
    assert sorted({s.code for s in stops}) == sorted(STOP_CODES)
    for stop in stops:
        kind = STOPS[stop.code]
        assert set(kind.detail_keys) <= set(stop.detail), stop.code
        assert kind.fired in stop.detail
        assert stop.action == kind.action
        assert stop.reason == stop_words(stop.code, stop.detail)


def test_the_stop_code_type_lists_the_registry_in_its_order_and_every_action_is_typed():
    assert get_args(StopCode) == STOP_CODES
    assert {kind.action for kind in STOPS.values()} <= set(get_args(StopAction))


def test_the_wire_accepts_exactly_the_registered_codes():
    base = {
        "v": 1,
        "type": "stop",
        "command_id": "c",
        "run_id": "r",
        "caused_by": "e",
        "round": 1,
        "action": "end_turn",
        "reason": "x",
        "detail": {},
    }
    for code in STOP_CODES:
        assert COMMAND_ADAPTER.validate_python({**base, "code": code}).code == code
    with pytest.raises(ValueError):
        COMMAND_ADAPTER.validate_python({**base, "code": "meteor"})


def test_words_close_with_the_answer_instruction_unless_the_turn_ends():
    for code, kind in STOPS.items():
        detail = {key: 3 for key in kind.detail_keys} | {"tool": "search", "call": "x"}
        text = stop_words(code, detail)
        assert (ANSWER in text) == (kind.action == "answer_without_tools"), code
    with pytest.raises(ValueError, match="no words"):
        stop_words("meteor", {})
