"""Fleet advisories: one nudge per (run, incident), nothing for an unknown or ended
run, the optional `fleet_breaker`, and no effect on streaks or run time."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stallwatch.contract.events import Policy, advisory_event_id
from stallwatch.contract.parse import InvalidEvent, parse_event
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.state import RunState
from stallwatch.engine.words import system_prompt
from tests.script import RunScript

EVIDENCE = {"calls": 40, "failures": 31, "runs": 12}


def advisory(
    run_id: str,
    incident: str = "open",
    kind: str = "tool_failing",
    tool: str = "search",
    incident_id: str = "inc-1",
    ts: float = 5_000.0,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "v": 1,
        "type": "fleet_advisory",
        "run_id": run_id,
        "ts": ts,
        "event_id": advisory_event_id(incident_id, run_id, incident),
        "incident_id": incident_id,
        "incident": incident,
        "kind": kind,
        "tool": tool,
        "tenant": None,
        "window_s": 300.0,
        "evidence": EVIDENCE,
        **extra,
    }


def apply(fleet: EmbeddedEngine, *events: dict[str, Any]) -> list:
    commands: list = []
    for event in events:
        commands.extend(fleet.handle(parse_event(orjson.dumps(event))))
    return commands


def started(policy: dict | None = None, mode: str = "researcher") -> tuple[EmbeddedEngine, RunScript]:
    fleet, script = EmbeddedEngine(), RunScript(mode=mode, policy=policy)
    script.round_of(("search", {"q": 1}, {"docs": [1]}))
    apply(fleet, *script.events)
    return fleet, script


def test_an_open_advisory_nudges_the_run_with_the_fleets_evidence():
    fleet, s = started()
    [nudge] = apply(fleet, advisory(s.run_id))
    assert nudge.type == "nudge" and nudge.run_id == s.run_id and nudge.round == 1
    assert nudge.reason == (
        "`search` failed in 31 of 40 calls across 12 runs in the last 5 "
        "minutes: don't retry it; use another tool or answer from what you have."
    )
    assert nudge.detail == {
        "incident_id": "inc-1",
        "kind": "tool_failing",
        "tool": "search",
        "window_s": 300.0,
        **EVIDENCE,
    }


@pytest.mark.parametrize(
    ("kind", "evidence", "words"),
    [
        (
            "tool_same_answer",
            {"answer_runs": 7, "answer_args": 9},
            "`search` gave the same answer to 9 different questions in 7 runs in the last 5 minutes",
        ),
        ("tool_looping", {"stops": 6}, "6 runs were stopped in the last 5 minutes while looping on `search`"),
        ("tool_failing", {}, "`search` has been failing across many runs in the last 5 minutes"),
    ],
)
def test_each_kind_has_its_words(kind, evidence, words):
    fleet, s = started()
    [nudge] = apply(fleet, advisory(s.run_id, kind=kind, evidence=evidence))
    assert nudge.reason.startswith(words)


def test_at_most_one_nudge_per_run_and_incident():
    fleet, s = started()
    first = apply(fleet, advisory(s.run_id))
    again = apply(fleet, advisory(s.run_id))  # the same event id: a redelivery
    # A different event id for the same incident (e.g. after a closed one) still says nothing.
    other = apply(fleet, advisory(s.run_id, event_id="fa-other"))
    second = apply(fleet, advisory(s.run_id, incident_id="inc-2"))
    assert len(first) == 1 and again == [] and other == [] and len(second) == 1


def test_an_unknown_or_ended_or_stopped_run_gets_nothing():
    fleet = EmbeddedEngine()
    assert apply(fleet, advisory("nobody")) == []
    assert "nobody" not in fleet.runs
    fleet, s = started()
    s.end()
    apply(fleet, s.events[-1])
    assert apply(fleet, advisory(s.run_id)) == []
    fleet, s = started(policy={"no_progress_threshold": 1})
    s.start_round()
    s.call("search", {"q": 2}, status="error", result={"error": "down"})
    assert [c.code for c in apply(fleet, *s.events[-3:]) if c.type == "stop"] == ["tool_failures"]
    assert apply(fleet, advisory(s.run_id)) == []


def test_an_advisory_changes_no_streak_counter_or_run_time():
    fleet, s = started(policy={"time_limit_s": 60.0})
    before = fleet.runs[s.run_id].to_bytes()
    late = s.ts + 3_600  # an hour after the run's last event: past its time limit
    assert [c.type for c in apply(fleet, advisory(s.run_id, ts=late))] == ["nudge"]
    after = RunState.from_bytes(fleet.runs[s.run_id].to_bytes())
    assert after.last_ts == RunState.from_bytes(before).last_ts
    assert after.advised == ["inc-1"]
    after.advised, after.event_ids = [], {}
    expected = RunState.from_bytes(before)
    expected.event_ids = {}
    assert after == expected  # nothing else moved: streaks, counters, clock
    s.start_round()
    assert [c.type for c in apply(fleet, *s.events[-1:])] == []  # no time_limit stop


def test_the_breaker_refuses_the_tool_until_the_incident_closes():
    fleet, s = started(policy={"fleet_breaker": True})
    apply(fleet, advisory(s.run_id))
    s.start_round()
    s.call("search", {"q": 2})
    s.call("fetch", {"url": "u"})
    verdicts = apply(fleet, *s.events[-3:])
    assert [(v.tool, v.code) for v in verdicts] == [("search", "fleet_incident"), ("fetch", None)]
    assert "failing in many runs" in verdicts[0].reason
    assert apply(fleet, advisory(s.run_id, incident="closed")) == []
    s.call("search", {"q": 2})
    assert [v.code for v in apply(fleet, s.events[-1])] == [None]


def test_without_the_breaker_or_for_other_kinds_calls_go_on():
    for policy, kind in ((None, "tool_failing"), ({"fleet_breaker": True}, "tool_same_answer")):
        fleet, s = started(policy=policy)
        apply(fleet, advisory(s.run_id, kind=kind))
        s.start_round()
        s.call("search", {"q": 2})
        assert [v.code for v in apply(fleet, *s.events[-2:])] == [None]


def test_chat_refusals_by_the_breaker_are_not_failures_of_the_tool():
    fleet, s = started(policy={"fleet_breaker": True, "no_progress_threshold": 2}, mode="chat")
    apply(fleet, advisory(s.run_id))
    s.start_round()
    for i in range(4):
        s.call("search", {"q": i})
    commands = apply(fleet, *s.events[-5:])
    assert [c.code for c in commands] == ["fleet_incident"] * 4  # no tool_failures stop


def test_the_breaker_and_the_told_incidents_survive_the_trip_through_bytes():
    fleet, s = started(policy={"fleet_breaker": True})
    apply(fleet, advisory(s.run_id))
    state = fleet.runs[s.run_id]
    copy = RunState.from_bytes(state.to_bytes())
    assert copy.fleet_incidents == {"search": "inc-1"} and copy.advised == ["inc-1"]
    assert copy.policy.fleet_breaker is True


def test_the_told_incidents_are_capped():
    fleet, s = started()
    for i in range(100):
        apply(fleet, advisory(s.run_id, incident_id=f"inc-{i}"))
    assert len(fleet.runs[s.run_id].advised) <= 32


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("v", 2),
        ("incident", "maybe"),
        ("kind", "tool_on_fire"),
        ("window_s", 0),
        ("evidence", {"calls": -1}),
        ("incident_id", ""),
        ("incident_id", "i" * 500),
    ],
)
def test_bad_advisories_are_refused_with_a_reason(field, value):
    with pytest.raises(InvalidEvent):
        parse_event(orjson.dumps(advisory("r", **{field: value})))


def test_the_event_id_is_derived_from_incident_run_and_state():
    assert advisory_event_id("inc-1", "r", "open") == advisory_event_id("inc-1", "r", "open")
    assert advisory_event_id("inc-1", "r", "open") != advisory_event_id("inc-1", "r", "closed")
    assert advisory_event_id("inc-1", "r", "open").startswith("fa-")
    assert len(advisory_event_id("inc-1", "r", "open")) == 3 + 32


def test_the_system_prompt_names_the_breaker_only_when_it_is_on():
    on = system_prompt("researcher", Policy.for_mode("researcher", {"fleet_breaker": True}))
    off = system_prompt("researcher", Policy.for_mode("researcher"))
    assert "failing in many runs across the fleet is refused" in on
    assert "fleet" not in off
