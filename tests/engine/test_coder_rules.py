"""Coder mode: effects, the workspace version, duplicates, new facts, stalls, failures, patterns."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.commands import encode_command
from stallwatch.contract.parse import parse_event
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.masks import DEFAULT_VOLATILE_PATTERNS, MASK, mask_strings
from stallwatch.engine.rules.workspace import call_label, effect_of
from stallwatch.engine.state import RunState
from tests.script import RunScript

TOOLS = [
    {"name": "bash"},
    {"name": "editor"},
    {"name": "view", "effect": "read"},
    {"name": "save", "effect": "write"},
]
REPRO = {"command": "python reproduce.py"}
TRACE = "Traceback (most recent call last):\nValueError: bad input"


def coder(policy: dict | None = None, tools: list | None = None, run_id: str = "run-1") -> RunScript:
    return RunScript(run_id, "coder", tools=tools or TOOLS, policy=policy)


def state_of(out) -> RunState:
    return out.engine.runs["run-1"]


def stops(out) -> list:
    return [(x.code, x.round) for x in out.stops]


def nudges(out) -> list:
    """Stall nudges (the already-seen nudge of researcher mode has no `same_result_runs`)."""
    return [c for c in out.commands if c.type == "nudge" and "same_result_runs" in c.detail]


def edit(s: RunScript, n: int, answer: str = "File edited.") -> None:
    s.round_of(("editor", {"path": "a.py", "new": f"version {n}"}, answer))


# -- effects and the workspace version ------------------------------------------------------------


def test_a_calls_effect_overrides_its_tools_and_unknown_is_the_default():
    state = RunState(mode="coder", started_ts=0, tool_effects={"view": "read", "save": "write"})
    assert effect_of(state, {"tool": "view"}) == "read"
    assert effect_of(state, {"tool": "view", "effect": "write"}) == "write"
    assert effect_of(state, {"tool": "editor", "effect": "read"}) == "read"
    assert effect_of(state, {"tool": "bash"}) == "unknown"


def test_every_allowed_call_that_is_not_a_read_advances_the_workspace_version(run):
    s = coder()
    s.round_of(("view", {"p": 1}, "x"), ("bash", {"c": 1}, "y"))  # a read, then an unknown
    s.round_of(("save", {"p": 2}, "ok"))  # a write
    s.start_round()
    s.call("editor", {"command": "view", "path": "a"}, status="ok", result="text")
    s.events[-2]["effect"] = "read"  # the runtime knows this editor command reads
    s.end_round()
    assert state_of(run(s)).workspace_version == 2


def test_effects_are_ignored_outside_coder_mode(run):
    s = RunScript(tools=[{"name": "search", "effect": "write"}])
    for _ in range(2):
        s.round_of(("search", {"q": 1}, {"n": 1}))
    out = run(s)
    assert out.codes() == [None, "duplicate_call"] and state_of(out).workspace_version == 0


# -- duplicates -----------------------------------------------------------------------------------


def test_a_read_is_refused_only_at_the_same_workspace_version(run):
    s = coder()
    s.round_of(("view", {"p": "a.py"}, "one"))
    s.round_of(("view", {"p": "a.py"}, "one"))  # nothing changed: refused
    edit(s, 1)
    s.round_of(("view", {"p": "a.py"}, "two"))  # re-read after an edit: allowed
    assert run(s).codes() == [None, "duplicate_call", None, None]


def test_an_exact_repeat_of_an_unknown_or_write_call_is_never_refused(run):
    s = coder()
    for _ in range(4):
        s.round_of(("bash", REPRO, TRACE), ("save", {"p": 1}, "saved"))
    assert set(run(s).codes()) == {None}


def test_a_repeat_exempt_read_is_never_refused(run):
    s = coder(tools=[{"name": "wait", "effect": "read", "repeat_exempt": True}])
    for _ in range(3):
        s.round_of(("wait", {}, "pending"))
    assert set(run(s).codes()) == {None}


# -- new facts ------------------------------------------------------------------------------------


def test_writes_answering_the_same_text_while_re_runs_show_progress_are_never_stopped(run):
    s = coder()
    for n in range(12):
        s.round_of(("editor", {"path": f"f{n}.py", "new": "x"}, "File created successfully."))
        s.round_of(("bash", {"command": "pytest"}, f"{12 - n} failed"))
    assert stops(run(s)) == [] and nudges(run(s)) == []


def test_the_same_call_returning_the_same_result_is_already_seen(run):
    s = coder()
    s.round_of(("bash", {"command": "ls"}, "a.py"))
    for _ in range(5):
        s.round_of(("bash", {"command": "ls"}, "a.py"))
    out = run(s)
    assert stops(out) == [("no_new_facts", 6)]
    assert out.stops[0].detail["workspace_version"] == 6


def test_a_command_printing_nothing_again_and_again_is_already_seen(run):
    s = coder()
    edit(s, 0)
    s.round_of(("bash", REPRO, ""))
    for _ in range(10):  # recorded: the same script, printing nothing, 24 times in a row
        s.round_of(("bash", REPRO, ""))
    assert stops(run(s)) == [("no_new_facts", 7)]
    first = coder()
    for n in range(8):  # other commands printing nothing: each a first run, new
        first.round_of(("bash", {"command": f"touch f{n}"}, ""))
    assert stops(run(first)) == []


def test_the_same_text_from_another_command_is_a_new_fact(run):
    s = coder()
    for n in range(8):  # reads with new arguments, all answering the same: each is new
        s.round_of(("view", {"path": f"f{n}.py"}, "empty file"))
    assert stops(run(s)) == []


# -- stalls ---------------------------------------------------------------------------------------


def stall_script(times: int, policy: dict | None = None) -> RunScript:
    s = coder(policy)
    for n in range(times):
        edit(s, n)
        s.round_of(("bash", REPRO, TRACE))
    return s


def test_the_same_result_after_each_of_three_edits_gets_one_nudge_naming_the_call(run):
    out = run(stall_script(6))
    [nudge] = nudges(out)
    assert "`python reproduce.py`" in nudge.reason and "last 3 runs" in nudge.reason
    assert nudge.detail == {
        "call": "python reproduce.py",
        "tool": "bash",
        "same_result_runs": 3,
        "stall_nudge_at": 3,
        "workspace_version": 6,
    }
    assert nudge.round == 6 and stops(out) == []


def test_repeats_without_another_change_between_are_no_stall(run):
    s = coder()
    edit(s, 0)
    for _ in range(4):  # its own runs are the only changes: a repeat, not a stall
        s.round_of(("bash", REPRO, TRACE))
    assert nudges(run(s)) == []


def test_stall_stop_at_stops_with_no_effect_and_null_turns_the_nudge_off(run):
    out = run(stall_script(6, {"stall_stop_at": 4}))
    assert stops(out) == [("no_effect", 8)]
    assert out.stops[0].detail["call"] == "python reproduce.py"
    assert "the changes are not having an effect" in out.stops[0].reason
    assert nudges(run(stall_script(6, {"stall_nudge_at": None}))) == []


def test_a_repeat_exempt_tool_answering_the_same_after_changes_is_no_stall(run):
    s = coder(tools=[*TOOLS, {"name": "wait_for_ci", "repeat_exempt": True}])
    for n in range(6):
        edit(s, n)
        s.round_of(("wait_for_ci", {}, "pending"))
    assert nudges(run(s)) == [] and run(s).stops == []


def test_a_changed_result_starts_the_stall_over(run):
    s = coder()
    for n in range(8):
        edit(s, n)
        s.round_of(("bash", REPRO, TRACE if n % 2 else "ok"))
    assert nudges(run(s)) == []


def test_a_write_answering_the_same_after_other_changes_is_no_stall(run):
    """A rejected edit, tried again after other changes: its answer reports the edit, not what
    the workspace does, so the words "did not change what it shows" would be wrong."""
    s = coder()
    rejected = "ERROR: old_str `x = 1` did not appear verbatim in a.py."
    for n in range(6):
        s.round_of(("bash", {"command": f"touch f{n}"}, "done"))
        s.start_round()
        s.call("save", {"path": "a.py", "old": "x = 1"}, status="error", result=rejected)
        s.end_round()
    out = run(s)
    assert nudges(out) == [] and out.stops == []
    call_effect = coder()
    for n in range(6):  # the call's own effect decides, not only its tool's
        edit(call_effect, n)
        call_effect.round_of(("bash", {"command": "sed -i s/a/b/ a.py"}, "sed: no match"))
        call_effect.events[-3]["effect"] = "write"  # its call_proposed
    assert nudges(run(call_effect)) == []


def test_a_command_printing_nothing_after_each_change_is_no_stall(run):
    s = coder()
    for n in range(6):  # `sed -i` prints nothing whether or not it changed anything
        edit(s, n)
        s.round_of(("bash", {"command": "sed -i 's/None/0o644/' settings.py"}, ""))
    hashed = coder()
    for n in range(6):  # a runtime sending only a fingerprint says `empty` itself
        edit(hashed, n)
        hashed.start_round()
        hashed.call("bash", REPRO, status="ok", fingerprint="ab" * 16, empty=True)
        hashed.end_round()
    assert nudges(run(s)) == [] and nudges(run(hashed)) == []
    shown = coder()
    for n in range(6):  # the same fingerprint, not empty: the stall counts as before
        edit(shown, n)
        shown.start_round()
        shown.call("bash", REPRO, status="ok", fingerprint="ab" * 16, empty=False)
        shown.end_round()
    assert len(nudges(run(shown))) == 1


def test_commands_printing_nothing_still_count_as_changes_between_runs(run):
    s = coder()
    for n in range(4):
        s.round_of(("bash", {"command": f"echo 'x = {n}' >> fix.py"}, ""))
        s.round_of(("bash", REPRO, TRACE))
    [nudge] = nudges(run(s))
    assert nudge.detail["call"] == "python reproduce.py" and nudge.round == 6


def test_a_read_showing_the_same_after_changes_still_counts_towards_a_stall(run):
    """A re-read cannot tell whether the changes touched what it shows (decisions.md): an edit
    that did not land and a region no edit touched look the same, so reads keep counting."""
    s = coder()
    for n in range(4):
        edit(s, n)
        s.round_of(("view", {"path": "a.py", "lines": "40,45"}, "if username is None:"))
    [nudge] = nudges(run(s))
    assert nudge.detail["same_result_runs"] == 3 and nudge.detail["tool"] == "view"


# -- failures -------------------------------------------------------------------------------------


def failing(s: RunScript, args: dict) -> None:
    s.start_round()
    s.call("editor", args, status="error", result="missing required parameter `path`")
    s.end_round()


def test_the_same_call_failing_with_nothing_else_changing_stops_at_the_threshold(run):
    s = coder()
    for _ in range(7):
        failing(s, {"command": "create", "file_text": "x"})  # `path` missing, 7 times
    out = run(s)
    assert [x.code for x in out.stops] == ["tool_failures"]
    assert out.stops[0].detail["consecutive_failures"] == 5
    assert out.stops[0].detail["call"] == 'editor {"command":"create","file_text":"x"}'


def test_other_changes_between_failures_reset_the_count_and_make_a_stall(run):
    s = coder()
    for n in range(7):
        edit(s, n)
        s.start_round()
        s.call("bash", REPRO, status="error", result=TRACE)
        s.end_round()
    out = run(s)
    assert out.stops == [] and len(nudges(out)) == 1


def test_different_commands_failing_do_not_add_up_and_a_success_resets(run):
    s = coder()
    for n in range(10):
        s.start_round()
        s.call("bash", {"command": f"cmd {n}"}, status="error", result="not found")
        s.end_round()
    same = coder()
    for n in range(10):
        same.start_round()
        same.call("bash", {"command": "flaky"}, status="ok" if n % 4 == 3 else "error", result=n)
        same.end_round()
    assert run(s).stops == [] and run(same).stops == []


# -- volatile patterns ----------------------------------------------------------------------------


def test_the_default_set_masks_durations_addresses_and_timestamps():
    text = (
        "1 failed in 0.05s; took 12 ms; <Foo object at 0x7f3a2c1b9d60>; "
        "at 2024-05-01T12:00:03.123Z; /bin/bash: line 62215: javac: command not found; "
        'File "a.py", line 7'
    )
    masked = mask_strings({"out": [text]}, DEFAULT_VOLATILE_PATTERNS)["out"][0]
    assert masked == (
        f"1 failed in {MASK}; took {MASK}; <Foo object at {MASK}>; at {MASK}; "
        f"/bin/bash: line {MASK}: javac: command not found; "
        'File "a.py", line 7'
    )


def test_a_test_run_differing_only_in_its_duration_is_a_stall_unless_the_tool_lists_its_own(run):
    def script(tools: list) -> RunScript:
        s = coder(tools=tools)
        for n in range(5):
            edit(s, n)
            s.round_of(("bash", {"command": "pytest"}, f"1 failed in 0.0{n + 1}s"))
        return s

    assert len(nudges(run(script(TOOLS)))) == 1
    own = [{"name": "bash", "volatile_patterns": []}, {"name": "editor"}]
    assert nudges(run(script(own))) == []


def test_a_pattern_that_is_no_regular_expression_is_a_dead_letter():
    bad = coder(tools=[{"name": "bash", "volatile_patterns": ["(unclosed"]}])
    engine = EmbeddedEngine()
    rejected = engine.handle_raw(orjson.dumps(bad.events[0]))
    assert "is not an RE2 regular expression" in rejected.letter.error


# -- labels, state --------------------------------------------------------------------------------


def test_a_calls_label_is_its_command_when_it_has_one():
    assert call_label("bash", {"command": "python  reproduce.py\n"}) == "python reproduce.py"
    assert call_label("bash", '{"cmd": "ls"}') == "ls"
    assert call_label("editor", {"path": "a", "n": 1}) == 'editor {"n":1,"path":"a"}'
    assert call_label("editor", {"command": "view", "path": "a"}) == 'editor {"command":"view","path":"a"}'
    assert len(call_label("bash", {"command": "x" * 500})) == 80


def test_a_coder_state_round_trips_and_researcher_events_parse_the_same(run):
    out = run(stall_script(4))
    state = state_of(out)
    assert state.call_history and RunState.from_bytes(state.to_bytes()) == state
    proposed = stall_script(1).events[2]
    assert parse_event(orjson.dumps({**proposed, "effect": "read"}))["effect"] == "read"


def test_a_stall_reaching_the_stop_and_the_nudge_at_once_only_stops(run):
    out = run(stall_script(4, {"stall_nudge_at": 3, "stall_stop_at": 3}))
    assert [x.code for x in out.stops] == ["no_effect"] and nudges(out) == []


def test_a_result_of_a_call_never_proposed_is_new_and_counts_nothing(run):
    s = coder()
    for n in range(8):
        s.start_round()
        s.add("call_result", round=s.round, call_id=f"ghost-{n}", tool="bash", status="error", result="same")
        s.end_round()
    out = run(s)
    assert out.stops == [] and state_of(out).call_history == {}


def test_the_oldest_signatures_are_forgotten_beyond_the_bound(run, monkeypatch):
    monkeypatch.setattr("stallwatch.engine.rules.workspace.MAX_CALL_HISTORY", 3)
    s = coder()
    for n in range(6):
        s.round_of(("bash", {"command": f"cmd {n}"}, "x"))
    history = state_of(run(s)).call_history
    assert len(history) == 3


def test_the_same_call_with_the_same_result_five_times_in_a_row_is_stopped_within_six_rounds(run):
    """The target for true loops, for an ok result, an error, and a read."""
    for tool, status in (("bash", "ok"), ("bash", "error"), ("view", "ok")):
        s = coder()
        for n in range(3):  # healthy work first
            edit(s, n)
        for _ in range(10):
            s.start_round()
            s.call(tool, {"command": "cat setup.cfg"}, status=status, result="[metadata]")
            s.end_round()
        out = run(s)
        assert len(out.stops) == 1 and out.stops[0].round <= 3 + 6, (tool, status, stops(out))


@pytest.mark.parametrize(
    "command, kept",
    [
        ("mysql -uroot -phunter22 shop", "mysql -uroot -p*** shop"),
        ("PGPASSWORD=hunter22 psql -h db", "PGPASSWORD=*** psql -h db"),
        (
            'curl -H "Authorization: Bearer hunter22hunter22" https://api',
            'curl -H "Authorization: *** ***" https://api',
        ),
        ("curl -u admin:hunter22 https://api", "curl -u *** https://api"),
        ("git clone https://bot:hunter22@git.example/repo", "git clone https://***@git.example/repo"),
        ("deploy --token hunter22 --region eu", "deploy --token *** --region eu"),
        ("export OPENAI_API_KEY=sk-hunter22hunter22", "export OPENAI_API_KEY=***"),
        ("python -m pytest -p no:cacheprovider tests", "python -m pytest -p no:cacheprovider tests"),
        ("grep -rn password src/", "grep -rn password src/"),
    ],
)
def test_a_calls_label_keeps_the_commands_shape_and_drops_its_secrets(command, kept):
    assert call_label("bash", {"command": command}) == kept


def test_no_command_or_stored_state_of_a_coder_run_holds_a_secret_of_its_commands(run):
    s = coder()
    for _ in range(5):  # the same failing command after each edit: a stall, with its label
        edit(s, _)
        s.round_of(("bash", {"command": "mysql -uroot -phunter22 shop < check.sql"}, "ERROR 1045"))
    out = run(s)
    assert nudges(out), "the stall is told, with the command's label"
    assert not [c for c in out.commands if b"hunter22" in encode_command(c)]
    assert b"hunter22" not in state_of(out).to_bytes()
