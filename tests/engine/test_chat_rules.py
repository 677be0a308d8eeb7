"""Chat mode: back-to-back repeats, refusals as failures, no result comparison."""

from __future__ import annotations

from tests.script import RunScript

PRICE = {"symbol": "ACME", "price": 12.5}


def chat(**kw) -> RunScript:
    return RunScript(
        mode="chat", tools=[{"name": "get_price"}, {"name": "wait", "repeat_exempt": True}], **kw
    )


def test_the_third_identical_call_in_a_row_is_refused_and_so_are_further_repeats(run):
    s = chat()
    s.start_round()
    for _ in range(4):
        s.call("get_price", {"symbol": "ACME"}, status="ok", result=PRICE)
    s.end_round()
    out = run(s)
    assert out.codes() == [None, None, "repeated_call", "repeated_call"]
    reason = out.verdicts[2].reason
    assert "3rd identical call" in reason and "use that value" in reason and "different tool" in reason


def test_a_call_with_another_signature_in_between_starts_the_count_over(run):
    s = chat()
    s.start_round()
    for _ in range(5):
        s.call("get_price", {"symbol": "ACME"}, status="ok", result=PRICE)
        s.call("get_price", {"symbol": "ACME"}, status="ok", result=PRICE)
        s.call("get_price", {"symbol": "OTHER"}, status="ok", result=PRICE)
    s.end_round()
    out = run(s)
    assert set(out.codes()) == {None} and out.stops == []


def test_repeats_across_rounds_count_too(run):
    s = chat()
    for _ in range(3):
        s.round_of(("get_price", '{"symbol":"ACME"}', PRICE))
    assert run(s).codes() == [None, None, "repeated_call"]


def test_repeat_exempt_tools_are_never_refused(run):
    s = chat()
    s.start_round()
    for _ in range(12):
        s.call("wait", {"for": "job-1"}, status="ok", result={"state": "running"})
    s.end_round()
    out = run(s)
    assert set(out.codes()) == {None} and out.stops == []


def test_refused_repeats_count_as_failures_and_stop_the_turn(run):
    s = chat()
    s.start_round()
    for _ in range(9):
        s.call("get_price", {"symbol": "ACME"})
    s.end_round()
    out = run(s)
    # Two allowed, then refusals; the fifth refusal is the fifth failure in a row.
    assert out.codes() == [None, None] + ["repeated_call"] * 5 + ["run_stopped"] * 2
    assert [(x.code, x.detail["consecutive_failures"]) for x in out.stops] == [("tool_failures", 5)]
    assert out.commands[7].type == "stop"  # right after the verdict of the seventh call


def test_chat_never_compares_results(run):
    s = chat()
    for i in range(20):
        s.round_of(("get_price", {"symbol": f"S{i}"}, PRICE))
    out = run(s)
    assert out.stops == [] and out.engine.runs["run-1"].fingerprints == {}


def test_chat_turn_stops_at_the_round_limit(run):
    s = chat(policy={"max_rounds": 4})
    for i in range(6):
        s.round_of(("get_price", {"symbol": f"S{i}"}, PRICE))
    assert [(x.code, x.round) for x in run(s).stops] == [("round_limit", 4)]


def test_chat_has_no_duplicate_rule_for_calls_not_back_to_back(run):
    s = chat()
    s.start_round()
    for _ in range(6):
        s.call("get_price", {"symbol": "A"}, status="ok", result=PRICE)
        s.call("get_price", {"symbol": "B"}, status="ok", result=PRICE)
    s.end_round()
    assert set(run(s).codes()) == {None}


def test_a_stop_reached_by_refusals_does_not_say_the_tool_failed(run):
    s = chat()
    s.start_round()
    for _ in range(7):
        s.call("get_price", {"symbol": "ACME"})
    s.end_round()
    (stop,) = run(s).stops
    assert stop.detail["refused"] is True
    assert "refused" in stop.reason and "failed 5 times" not in stop.reason
    assert "was failing" not in stop.reason
