"""A redelivered event (same event_id) has no further effect, before a run's end and after it,
and no command id ever carries two contents."""

from __future__ import annotations

from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.state import EVENT_WINDOW, RunState
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
    state = run(s).engine.runs[s.run_id]
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
    assert after.engine.runs[s.run_id] == before.engine.runs[s.run_id]


# -- beyond the window of recent ids, and after the state is gone ---------------------------


def contents_by_id(commands) -> dict[str, bytes]:
    """Every command id with its one content; fails when an id carries two."""
    seen: dict[str, bytes] = {}
    for command in commands:
        raw = encode_command(command)
        assert seen.setdefault(command.command_id, raw) == raw, f"id {command.command_id}: two contents"
    return seen


def long_run(
    rounds: int,
    mode: str = "researcher",
    policy: dict | None = None,
    run_id: str = "run-1",
    ts: float = 1_000.0,
) -> RunScript:
    """A healthy run of `rounds` rounds of 10 calls, each bringing a new fact: 22 events a round."""
    s = RunScript(run_id, mode=mode, policy=policy, ts=ts)
    for r in range(rounds):
        s.round_of(*[("search", {"q": f"{r}-{i}"}, {"documents": [{"id": f"{r}-{i}"}]}) for i in range(10)])
    return s


def test_a_round_1_call_redelivered_after_600_events_of_a_healthy_run_is_not_refused(run):
    s = long_run(28)
    s.start_round()
    s.call("search", {"q": "new"})
    before = run(s)
    s.events.append(dict(s.events[2]))  # round 1's first call_proposed, 600 events later
    s.call("search", {"q": "newer"})
    after = run(s)
    assert len(s.events) > EVENT_WINDOW + 100
    contents_by_id(after.commands)
    # No second verdict for the redelivered call, and nothing else changed.
    assert after.commands[: len(before.commands)] == before.commands
    assert [(v.call_id, v.decision) for v in after.verdicts[len(before.verdicts) :]] == [("c282", "allow")]


def test_a_round_1_call_redelivered_in_a_stopped_run_beyond_the_window_gets_no_run_stopped(run):
    s = long_run(27, policy={"max_rounds": 27})  # stops at the end of round 27, 596 events
    first = s.events[2]
    s.events.append(dict(first))
    out = run(s)
    assert out.stops and len(s.events) > EVENT_WINDOW
    ids = contents_by_id(out.commands)
    answers = [v for v in out.verdicts if v.caused_by == first["event_id"]]
    assert [(v.decision, v.code) for v in answers] == [("allow", None)] and len(ids) == len(out.commands)


def test_a_call_redelivered_after_its_run_ended_beyond_the_window_gets_no_run_stopped(run):
    s = long_run(27)
    s.end()
    s.events.append(dict(s.events[2]))
    out = run(s)
    contents_by_id(out.commands)
    assert [v.code for v in out.verdicts].count("run_stopped") == 0


def test_a_call_redelivered_after_its_run_expired_is_answered_under_an_id_of_its_own(run):
    s = RunScript()
    s.round_of(("search", {"q": 1}, DOCS))
    s.end()
    engine = EmbeddedEngine()
    first = run(s, engine).commands
    del engine.runs[s.run_id]  # the worker expired the ended run's state (ended_retention_s)
    redelivered = engine.handle(dict(s.events[2]))
    contents_by_id(first + redelivered)
    # The reader's rule: the first verdict of a call is its answer; this one is another id.
    assert [(v.call_id, v.decision) for v in redelivered] == [("c1", "allow")]
    assert redelivered[0].command_id != first[0].command_id


def test_an_old_round_ended_redelivered_beyond_the_window_does_not_close_the_open_round(run):
    s = long_run(29, mode="chat", policy={"max_rounds": 30})
    s.start_round()  # round 30, the last: it stops at its end, not before
    s.call("search", {"q": "a"})
    s.events.append(dict(s.events[-2 - 22 * 29 + 21]))  # round 1's round_ended
    assert s.events[-1]["type"] == "round_ended" and s.events[-1]["round"] == 1
    s.call("search", {"q": "b"})
    s.end_round()
    out = run(s)
    contents_by_id(out.commands)
    assert [v.code for v in out.verdicts[-2:]] == [None, None]
    assert [(x.code, x.round) for x in out.stops] == [("round_limit", 30)]
    assert out.stops[0].caused_by == s.events[-1]["event_id"]
