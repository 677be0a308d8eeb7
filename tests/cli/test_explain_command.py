"""`stallwatch explain`: a run's timeline from a recorded log, judged as the workers judge it."""

from __future__ import annotations

import io

from stallwatch.cli.explain import explain
from tests.script import RunScript


def test_the_timeline_shows_rounds_streaks_refusals_the_nudge_and_the_stop():
    s = RunScript("looper")
    s.round_of(("search", {"q": "kafka"}, {"docs": [1]}))
    s.start_round()
    s.call("search", {"q": "kafka"})  # a duplicate
    s.end_round()
    for i in range(6):
        s.round_of(("search", {"q": f"wording {i}"}, {"docs": [1]}))
    other = RunScript("other")
    other.round_of(("search", {"q": "x"}, {"docs": [2]}))
    out = io.StringIO()
    assert explain("looper", s.lines() + other.lines(), out)
    text = out.getvalue()
    assert text.startswith("run looper (researcher), tools: search\n")
    assert (
        "round 1\n  end of round 1: 1 ran, 0 refused; new fact: yes; already-seen streak 0, "
        "all-refused streak 0\n"
    ) in text
    assert "round 2\n  refused search({'q': 'kafka'}) [duplicate_call]: Refused: this exact call" in text
    assert (
        "end of round 2: 0 ran, 1 refused; new fact: -; already-seen streak 0, all-refused streak 1"
    ) in text
    assert "end of round 5: 1 ran, 0 refused; new fact: no; already-seen streak 3" in text
    assert "  nudge: Nothing new has come back for 3 rounds" in text
    assert "STOP at round 7 [no_new_facts, answer_without_tools]" in text
    assert "other" not in text.split("\n", 1)[1]


def test_an_unknown_run_says_so():
    out = io.StringIO()
    assert not explain("ghost", RunScript("real").lines(), out)
    assert "no event of run 'ghost'" in out.getvalue()


def test_a_coder_timeline_shows_workspace_versions_stalls_and_the_new_stop():
    s = RunScript("coding", "coder", tools=[{"name": "bash"}], policy={"stall_stop_at": 4})
    for n in range(4):
        s.round_of(
            ("bash", {"command": f"sed -i s/{n}/x/ a.py"}, ""),
            ("bash", {"command": "python repro.py"}, "Error"),
        )
    out = io.StringIO()
    assert explain("coding", s.lines(), out)
    text = out.getvalue()
    assert "end of round 1: 2 ran, 0 refused; new fact: yes" in text
    assert "workspace version 2, stalled calls 0" in text
    assert "workspace version 6, stalled calls 1" in text
    assert "  stall nudge: The last 3 runs of `python repro.py` gave the same result" in text
    assert "STOP at round 4 [no_effect, answer_without_tools] same_result_runs 4; {" in text
