"""Properties over random logs: determinism, one verdict per call, at most one stop per run."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine
from tests.script import RunScript

call = st.tuples(
    st.sampled_from(["search", "fetch", "wait"]),
    st.integers(0, 4),
    st.sampled_from(["ok", "ok", "ok", "error", "overloaded"]),
    st.integers(0, 3),
)
rounds = st.lists(st.lists(call, max_size=4), max_size=14)


def build(run_id: str, mode: str, plan: list) -> RunScript:
    s = RunScript(
        run_id,
        mode,
        tools=[{"name": "search"}, {"name": "fetch"}, {"name": "wait", "repeat_exempt": True}],
        policy={"max_rounds": 10, "call_budget": 25},
    )
    for calls in plan:
        s.start_round()
        for tool, arg, status, result in calls:
            s.call(tool, {"a": arg}, status=status, result={"r": result} if result else [])
        s.end_round()
    return s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["researcher", "chat"]), rounds), min_size=1, max_size=4))
def test_replaying_the_same_log_twice_gives_identical_commands(runs):
    scripts = [build(f"run-{i}", mode, plan) for i, (mode, plan) in enumerate(runs)]
    lines = [line for s in scripts for line in s.lines()]

    def replay() -> list[bytes]:
        out = []
        for result in EmbeddedEngine().replay(lines):
            out.extend(encode_command(c) for c in result)
        return out

    first = replay()
    assert first == replay()

    commands = [c for result in EmbeddedEngine().replay(lines) for c in result]
    for s in scripts:
        mine = [c for c in commands if c.run_id == s.run_id]
        proposed = [e["call_id"] for e in s.events if e["type"] == "call_proposed"]
        assert [c.call_id for c in mine if c.type == "verdict"] == proposed
        stops = [i for i, c in enumerate(mine) if c.type == "stop"]
        assert len(stops) <= 1
        if stops:
            assert {c.code for c in mine[stops[0] + 1 :]} <= {"run_stopped"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds, st.sampled_from([None, "read", "write"]))
def test_coder_runs_replay_the_same_and_answer_every_call_once(plan, effect):
    s = RunScript(
        "coder-run",
        "coder",
        tools=[
            {"name": "search", "effect": effect},
            {"name": "fetch"},
            {"name": "wait", "repeat_exempt": True},
        ],
        policy={"max_rounds": 10, "stall_nudge_at": 2, "stall_stop_at": 3},
    )
    for calls in plan:
        s.start_round()
        for tool, arg, status, result in calls:
            s.call(tool, {"a": arg}, status=status, result={"r": result} if result else [])
        s.end_round()
    lines = s.lines()
    first = [encode_command(c) for result in EmbeddedEngine().replay(lines) for c in result]
    assert first == [encode_command(c) for result in EmbeddedEngine().replay(lines) for c in result]
    commands = [c for result in EmbeddedEngine().replay(lines) for c in result]
    proposed = [e["call_id"] for e in s.events if e["type"] == "call_proposed"]
    assert [c.call_id for c in commands if c.type == "verdict"] == proposed
    assert sum(c.type == "stop" for c in commands) <= 1
