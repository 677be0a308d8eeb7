"""`stallwatch explain` and `stallwatch top` write no control character from the log or the
topics to the terminal: every name, label, reason and detail they print is escaped."""

from __future__ import annotations

import io
import unicodedata

import orjson
import pytest

from stallwatch.cli.explain import explain
from stallwatch.cli.top import OpenIncidents, Tally
from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine
from tests.script import RunScript

HOSTILE = [
    "se\x1b[2J\x1b[31march\x1b[0m",
    "search\nrefused everything [duplicate_call]: fake line",
    "\x1b]8;;http://evil.example\x07link\x1b]8;;\x07",
    "abc\u202edcb\u2066x\u2069",
    "zero\u200bwidth\u2028sep",
    "\x9b2Jc1\x85next\x07bell",
]
BENIGN = "search"
HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def hidden(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in HIDDEN]


def looping_runs(name: str) -> RunScript:
    """A researcher run named and calling `name`: a refused duplicate, five failures (a
    `tool_failures` stop naming it), a string argument, a reason to end."""
    s = RunScript(f"run-{name}", tools=[{"name": name}, {"name": BENIGN}])
    s.round_of((name, {"q": name}, {"docs": [1]}))
    s.start_round()
    s.call(name, {"q": name})  # a duplicate: refused
    s.end_round()
    for i in range(5):
        s.start_round()
        s.call(name, f"{name} {i}", status="error", result=name)
        s.end_round()
    s.add("run_ended", reason=name)
    return s


def coder_run(name: str) -> RunScript:
    """A coder run whose stalled call's label is `name`: a stall nudge and a no_effect stop."""
    s = RunScript(f"coding-{name}", "coder", tools=[{"name": "bash"}], policy={"stall_stop_at": 4})
    for n in range(4):
        s.round_of(("bash", {"command": f"sed -i s/{n}/x/ a.py"}, ""), ("bash", {"command": name}, "Error"))
    return s


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("script", [looping_runs, coder_run], ids=lambda f: f.__name__)
def test_explain_escapes_every_field_of_the_log(script, name):
    out, plain = io.StringIO(), io.StringIO()
    hostile_run, benign_run = script(name), script(BENIGN)
    assert explain(hostile_run.run_id, hostile_run.lines(), out)
    assert explain(benign_run.run_id, benign_run.lines(), plain)
    text = out.getvalue()
    assert not hidden(text), hidden(text)
    assert text.count("\n") == plain.getvalue().count("\n")
    assert "STOP at round" in text


def commands_of(*scripts: RunScript) -> list[bytes]:
    return [
        encode_command(command)
        for s in scripts
        for result in EmbeddedEngine().replay(s.lines())
        for command in result
    ]


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_top_escapes_names_codes_and_incidents_from_the_topics(name):
    def rendered(who: str) -> str:
        tally, incidents = Tally(), OpenIncidents()
        for raw in commands_of(looping_runs(who), coder_run(who)):
            tally.add(raw)
        # What a broken or hostile producer could put on the commands topic.
        for n, code in enumerate((who, ["a", who], 7)):
            tally.add(orjson.dumps({"command_id": f"{who}{n}", "type": "verdict", "tool": who, "code": code}))
            tally.add(
                orjson.dumps({"command_id": f"{who}s{n}", "type": "stop", "code": code, "detail": [who]})
            )
        incidents.add(
            who.encode(),
            orjson.dumps(
                {
                    "incident_id": who,
                    "state": "open",
                    "kind": who,
                    "tool": who,
                    "tenant": who,
                    "opened_at": who,
                    "evidence": {who: who},
                }
            ),
        )
        out = io.StringIO()
        incidents.render(out)
        tally.render(out)
        return out.getvalue()

    text, plain = rendered(name), rendered(BENIGN)
    assert not hidden(text), hidden(text)
    assert text.count("\n") == plain.count("\n")
    assert "stopped for failing" in text
