"""A redelivered event (same event_id) has no further effect, before a run's end and after it."""

from __future__ import annotations

from stallwatch.engine.state import RunState
from tests.script import RunScript

DOCS = {"documents": [{"id": "a"}]}


def ended_run_with_a_redelivered_call() -> RunScript:
    s = RunScript()
    s.round_of(("search", {"q": 1}, DOCS))
    s.start_round()
    s.call("search", {"q": 2})
    proposed = dict(s.events[-1])
    s.end()
    s.events.append(proposed)  # a runtime's retry of a call answered before the end
    return s


def test_a_call_redelivered_after_run_ended_gets_no_second_verdict(run):
    out = run(ended_run_with_a_redelivered_call())
    assert out.codes() == [None, None]  # one verdict per call_proposed, no run_stopped copy
    assert len({c.command_id for c in out.commands}) == len(out.commands)


def test_a_new_call_after_run_ended_is_still_refused(run):
    s = ended_run_with_a_redelivered_call()
    s.start_round()
    s.call("search", {"q": 3})
    assert run(s).codes() == [None, None, "run_stopped"]


def test_the_window_survives_the_trip_through_bytes(run):
    s = ended_run_with_a_redelivered_call()
    state = run(s).fleet.runs[s.run_id]
    copy = RunState.from_bytes(state.to_bytes())
    assert copy.ended and copy.event_ids == state.event_ids and len(copy.event_ids) == len(s.events) - 1


def test_every_event_type_redelivered_after_the_end_changes_nothing(run):
    s = RunScript()
    s.round_of(("search", {"q": 1}, DOCS))
    s.end()
    before = run(s)
    s.events.extend(dict(e) for e in list(s.events))  # the whole run once more
    after = run(s)
    assert after.commands == before.commands
    assert after.fleet.runs[s.run_id] == before.fleet.runs[s.run_id]
