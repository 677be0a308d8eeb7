"""Researcher mode, rule by rule, including the cases the contract's text calls out."""

from __future__ import annotations

from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.embedded import EmbeddedEngine
from tests.script import RunScript

DOCS = {"documents": [{"id": "d1", "title": "Kafka"}, {"id": "d2", "title": "Faust"}]}


def test_duplicate_call_is_refused_whatever_the_key_order_whitespace_or_json_text(run):
    s = RunScript()
    s.start_round()
    s.call("search", {"q": "kafka", "limit": 5}, status="ok", result=DOCS)
    s.call("search", {"limit": 5, "q": "kafka"})
    s.call("search", '{ "q" : "kafka",\n "limit": 5 }')
    s.call("search", {"q": "kafka", "limit": 6})
    s.end_round()
    out = run(s)
    assert out.codes() == [None, "duplicate_call", "duplicate_call", None]
    assert "already ran" in out.verdicts[1].reason and "change the arguments" in out.verdicts[1].reason


def test_a_duplicate_in_a_later_round_is_refused_too(run):
    s = RunScript()
    s.round_of(("search", {"q": "a"}, DOCS))
    s.start_round()
    s.call("search", {"q": "a"})
    s.end_round()
    assert run(s).codes() == [None, "duplicate_call"]


def test_paging_never_trips(run):
    s = RunScript(policy={"max_rounds": 40})
    for page in range(1, 36):
        s.round_of(("search", {"q": "kafka", "page": page}, {"page": page, "documents": [page]}))
    out = run(s)
    assert out.stops == []
    assert set(out.codes()) == {None}


def test_reworded_queries_with_the_same_results_stop_at_the_fifth_seen_round(run):
    s = RunScript()
    for i in range(21):
        s.round_of(("search", {"q": f"kafka streams wording {i}"}, DOCS))
    out = run(s)
    assert len(out.stops) == 1
    stop = out.stops[0]
    assert (stop.code, stop.round, stop.action) == ("no_new_facts", 6, "answer_without_tools")
    assert stop.detail["already_seen_streak"] == 5
    assert "Answer now" in stop.reason
    # After the stop every call is refused with run_stopped.
    assert out.codes()[6:] == ["run_stopped"] * 15


def test_the_same_result_in_another_key_order_or_spacing_is_already_seen(run):
    s = RunScript(policy={"no_progress_threshold": 2})
    s.round_of(("search", {"q": 1}, {"a": 1, "b": [1, 2]}))
    s.round_of(("search", {"q": 2}, {"b": [1, 2], "a": 1}))
    s.round_of(("search", {"q": 3}, '{"b": [1,  2], "a": 1}'))
    assert [x.code for x in run(s).stops] == ["no_new_facts"]


def test_one_new_result_in_a_round_resets_the_already_seen_streak(run):
    s = RunScript()
    for i in range(4):
        s.round_of(("search", {"q": i}, DOCS))
    s.round_of(("search", {"q": "x"}, DOCS), ("search", {"q": "y"}, {"new": True}))
    for i in range(4):
        s.round_of(("search", {"q": f"again {i}"}, DOCS))
    out = run(s)
    assert out.stops == []
    assert out.engine.runs["run-1"].already_seen_streak == 4


def test_refusals_scattered_between_productive_rounds_never_stop_a_run(run):
    s = RunScript()
    s.round_of(("search", {"q": "a"}, DOCS))
    for i in range(15):
        s.start_round()
        s.call("search", {"q": "a"})  # refused: duplicate
        s.end_round()
        s.round_of(("search", {"q": f"new {i}"}, {"n": i}))
    out = run(s)
    assert out.stops == []
    assert out.codes().count("duplicate_call") == 15


def test_five_all_refused_rounds_stop_the_run(run):
    s = RunScript()
    s.round_of(("search", {"q": "a"}, DOCS))
    for _ in range(5):
        s.start_round()
        s.call("search", {"q": "a"})
        s.call("search", {"q": "a"})
        s.end_round()
    out = run(s)
    assert [(x.code, x.round) for x in out.stops] == [("all_refused", 6)]
    assert out.stops[0].detail["all_refused_streak"] == 5


def test_the_two_counters_stay_apart(run):
    s = RunScript()
    s.round_of(("search", {"q": "a"}, DOCS))
    s.round_of(("search", {"q": "b"}, DOCS))
    s.round_of(("search", {"q": "c"}, DOCS))  # already-seen streak 2
    for _ in range(4):  # all-refused streak 4; nothing ran, so already-seen stays 2
        s.start_round()
        s.call("search", {"q": "a"})
        s.end_round()
    out = run(s)
    state = out.engine.runs["run-1"]
    assert (state.already_seen_streak, state.all_refused_streak) == (2, 4)
    # A round that runs a call and sees old results: already-seen grows, all-refused resets.
    s2 = RunScript()
    s2.events = list(s.events)
    s2.round, s2.ts = s.round, s.ts
    s2.round_of(("search", {"q": "d"}, DOCS))
    state = run(s2).engine.runs["run-1"]
    assert (state.already_seen_streak, state.all_refused_streak) == (3, 0)


def test_the_wait_tool_is_never_refused(run):
    s = RunScript(tools=[{"name": "wait_for_researchers", "repeat_exempt": True}])
    for _ in range(12):
        s.round_of(("wait_for_researchers", {"ids": ["r1", "r2"]}, {"status": "running"}))
    out = run(s)
    assert set(out.codes()) == {None}
    assert out.stops == []


def test_zero_results_of_any_shape_count_as_new(run):
    empties = [
        [],
        {},
        "",
        0,
        None,
        False,
        {"documents": []},
        {"a": {"b": [[], {}]}, "c": ""},
        "[]",
        '{"items": []}',
        {"total": 0, "items": [], "next": None},
    ]
    s = RunScript()
    for i in range(3):
        for j, empty in enumerate(empties):
            s.round_of(("search", {"q": f"{i}-{j}"}, empty))
    out = run(s)
    assert out.stops == []
    assert out.engine.runs["run-1"].fingerprints == {}


def test_a_locally_hashed_empty_result_is_new(run):
    s = RunScript()
    for i in range(8):
        s.start_round()
        s.call("search", {"q": i}, status="ok", fingerprint="0" * 32, empty=True)
        s.end_round()
    assert run(s).stops == []


def test_a_locally_hashed_result_compares_with_one_sent_whole():
    from stallwatch.engine.canonical import fingerprint

    s = RunScript(policy={"no_progress_threshold": 2})
    s.round_of(("search", {"q": 1}, DOCS))
    for i in range(2):
        s.start_round()
        s.call("search", {"q": f"h{i}"}, status="ok", fingerprint=fingerprint(DOCS)[0], empty=False)
        s.end_round()
    from tests.engine.conftest import Outcome

    assert [x.code for x in Outcome(EmbeddedEngine(), s).stops] == ["no_new_facts"]


def test_results_with_no_content_count_as_new(run):
    s = RunScript()
    for i in range(10):
        s.start_round()
        s.call("search", {"q": i}, status="ok")  # neither result nor fingerprint
        s.end_round()
    assert run(s).stops == []


def test_a_call_whose_result_never_arrives_counts_as_new(run):
    s = RunScript()
    s.round_of(("search", {"q": 0}, DOCS))
    for i in range(8):
        s.start_round()
        s.call("search", {"q": i + 1})
        s.end_round()
    assert run(s).stops == []


def test_requires_approval_results_are_new_and_duplicates_still_refused(run):
    s = RunScript(tools=[{"name": "search"}, {"name": "send_email", "requires_approval": True}])
    for i in range(8):
        s.round_of(("send_email", {"to": f"user{i}"}, {"sent": True}))
    s.start_round()
    s.call("send_email", {"to": "user0"})
    s.end_round()
    out = run(s)
    assert out.stops == []
    assert out.codes()[-1] == "duplicate_call"


def test_the_administrator_policy_marks_tools_by_glob(run, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\nrequires_approval = ["db_write_*"]\n')
    s = RunScript(tools=[{"name": "db_write_rows"}])
    for i in range(8):
        s.round_of(("db_write_rows", {"rows": [i]}, {"ok": True}))
    assert run(s, EmbeddedEngine(AdminPolicy.load(policy))).stops == []
    # Without the policy the same run is stopped for repeating itself.
    assert [x.code for x in run(s).stops] == ["no_new_facts"]


def test_consecutive_failures_of_one_tool_stop_the_run(run):
    s = RunScript()
    s.start_round()
    for i in range(5):
        s.call("search", {"q": i}, status="error", result={"error": f"timeout {i}"})
    s.end_round()
    out = run(s)
    assert [(x.code, x.detail["tool"], x.detail["consecutive_failures"]) for x in out.stops] == [
        ("tool_failures", "search", 5)
    ]
    assert out.commands[-1].type == "stop"  # fired on the fifth failure, before round_ended


def test_a_success_resets_the_tool_failure_count_and_other_tools_count_apart(run):
    s = RunScript(tools=[{"name": "search"}, {"name": "fetch"}])
    s.start_round()
    for i in range(4):
        s.call("search", {"q": i}, status="error")
        s.call("fetch", {"u": i}, status="error")
    s.call("search", {"q": "ok"}, status="ok", result=DOCS)
    for i in range(4):
        s.call("search", {"q": f"e{i}"}, status="overloaded")
    s.end_round()
    out = run(s)
    assert out.stops == []
    assert out.engine.runs["run-1"].failures == {"search": 4, "fetch": 4}


def test_call_budget_refuses_further_calls_and_stops_at_the_end_of_the_round(run):
    s = RunScript(policy={"call_budget": 3})
    s.start_round()
    for i in range(5):
        s.call("search", {"q": i}, status="ok", result={"n": i})
    s.end_round()
    out = run(s)
    assert out.codes() == [None, None, None, "budget_exhausted", "budget_exhausted"]
    assert "budget of 3" in out.verdicts[3].reason
    assert [(x.code, x.round) for x in out.stops] == [("call_budget", 1)]
    assert out.commands[-1].caused_by == s.events[-1]["event_id"]  # at round_ended


def test_overloaded_calls_do_not_use_the_budget_up_to_the_exemption(run):
    s = RunScript(policy={"call_budget": 2, "overloaded_exempt_max": 2})
    s.start_round()
    s.call("search", {"q": 1}, status="overloaded")
    s.call("search", {"q": 2}, status="overloaded")
    s.call("search", {"q": 3}, status="overloaded")  # the third is charged
    s.call("search", {"q": 4}, status="ok", result={"n": 4})
    s.call("search", {"q": 5}, status="ok", result={"n": 5})
    s.end_round()
    out = run(s)
    assert out.codes() == [None, None, None, None, "budget_exhausted"]


def test_rounds_with_exempted_overloaded_calls_grow_the_round_limit(run):
    s = RunScript(policy={"max_rounds": 3})
    s.start_round()
    s.call("search", {"q": 0}, status="overloaded")
    s.end_round()
    s.start_round()
    s.call("search", {"q": 1}, status="overloaded")
    s.call("search", {"q": 2}, status="overloaded")
    s.end_round()
    for i in range(3):
        s.round_of(("search", {"q": f"n{i}"}, {"n": i}))
    out = run(s)
    assert [(x.code, x.round, x.detail["max_rounds"]) for x in out.stops] == [("round_limit", 5, 5)]


def test_round_limit_stops_at_the_end_of_max_rounds(run):
    s = RunScript(policy={"max_rounds": 3})
    for i in range(5):
        s.round_of(("search", {"q": i}, {"n": i}))
    out = run(s)
    assert [(x.code, x.round) for x in out.stops] == [("round_limit", 3)]
    assert out.codes()[3:] == ["run_stopped", "run_stopped"]


def test_time_limit_uses_event_time_and_ends_the_turn(run):
    s = RunScript(policy={"time_limit_s": 10})
    s.round_of(("search", {"q": 1}, {"n": 1}))
    s.ts += 20
    s.start_round()
    s.call("search", {"q": 2})
    s.end_round()
    out = run(s)
    assert [(x.code, x.action) for x in out.stops] == [("time_limit", "end_turn")]
    assert out.codes() == [None, "run_stopped"]
    assert out.commands[-2].type == "stop"  # the stop comes before the verdict it causes


def test_one_stop_per_run(run):
    s = RunScript(policy={"max_rounds": 2, "no_progress_threshold": 1})
    s.round_of(("search", {"q": 1}, DOCS))
    s.round_of(("search", {"q": 2}, DOCS))  # already seen and the round limit, in one round
    s.round_of(("search", {"q": 3}, DOCS))
    out = run(s)
    assert [x.code for x in out.stops] == ["no_new_facts"]


def test_a_redelivered_event_has_no_further_effect(run):
    s = RunScript()
    s.start_round()
    s.call("search", {"q": 1})
    s.events.append(dict(s.events[-1]))  # the same call_proposed, delivered twice
    s.add("call_result", round=1, call_id="c1", tool="search", status="error")
    s.events.append(dict(s.events[-1]))
    out = run(s)
    assert len(out.verdicts) == 1
    assert out.engine.runs["run-1"].failures == {"search": 1}


def test_command_ids_are_deterministic_and_unique(run):
    s = RunScript()
    for i in range(8):
        s.round_of(("search", {"q": i}, DOCS))
    first, second = run(s), run(s)
    ids = [c.command_id for c in first.commands]
    assert ids == [c.command_id for c in second.commands]
    assert len(set(ids)) == len(ids)


def test_a_call_for_a_run_never_started_is_allowed(run):
    s = RunScript(run_id="ghost")
    s.events.clear()
    s.start_round()
    s.call("search", {"q": 1})
    out = run(s)
    assert out.codes() == [None] and "no record" in out.verdicts[0].reason


def test_an_ended_run_is_released_and_later_calls_refused(run):
    s = RunScript()
    for i in range(3):
        s.round_of(("search", {"q": i}, {"n": i}))
    s.end()
    s.start_round()
    s.call("search", {"q": 9})
    out = run(s)
    state = out.engine.runs["run-1"]
    assert state.ended and not state.fingerprints and not state.signatures
    assert out.codes()[-1] == "run_stopped"


def test_round_ended_skipped_by_the_runtime_is_closed_by_the_next_round(run):
    s = RunScript()
    s.round_of(("search", {"q": 0}, DOCS))
    for i in range(5):
        s.start_round()
        s.call("search", {"q": i + 1}, status="ok", result=DOCS)  # no round_ended
    s.start_round()
    out = run(s)
    assert [(x.code, x.round) for x in out.stops] == [("no_new_facts", 6)]


def test_a_time_limit_stop_at_a_rounds_start_carries_that_round(run):
    s = RunScript(policy={"time_limit_s": 10})
    for i in range(5):
        s.round_of(("search", {"q": i}, {"n": i}))
    s.ts += 20
    s.start_round()  # round 6's round_started is the late event
    assert [(x.code, x.round) for x in run(s).stops] == [("time_limit", 6)]
