"""`stallwatch replay` of a log with fleet advisories reproduces every decision they caused."""

from __future__ import annotations

import orjson

from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine
from tests.cli.test_replay_command import replay
from tests.engine.test_fleet_advisory import advisory
from tests.script import RunScript


def log_with_advisories() -> list[bytes]:
    told, breaker, ended = (
        RunScript("told"),
        RunScript("breaker", policy={"fleet_breaker": True}),
        RunScript("ended"),
    )
    for s in (told, breaker, ended):
        s.round_of(("search", {"q": 1}, {"docs": [1]}))
    ended.end()
    lines = [*told.lines(), *breaker.lines(), *ended.lines()]
    lines += [orjson.dumps(advisory(r)) for r in ("told", "breaker", "ended", "nobody", "told")]
    for s in (told, breaker):
        s.start_round()
        s.call("search", {"q": 2}, status="ok", result={"docs": [2]})
        s.end_round()
        lines += s.lines()[-4:]
    lines += [orjson.dumps(advisory("breaker", incident="closed"))]
    breaker.start_round()
    breaker.call("search", {"q": 3})
    return lines + breaker.lines()[-2:]


def test_replay_reproduces_the_advisories_decisions():
    lines = log_with_advisories()
    done = replay(b"\n".join(lines) + b"\n", "-")
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    commands = [orjson.loads(x) for x in done.stdout.splitlines()]
    nudges = [(c["run_id"], c["detail"]["incident_id"]) for c in commands if c["type"] == "nudge"]
    assert nudges == [("told", "inc-1"), ("breaker", "inc-1")]
    codes = [(c["run_id"], c["code"]) for c in commands if c["type"] == "verdict"][-3:]
    assert codes == [("told", None), ("breaker", "fleet_incident"), ("breaker", None)]
    fleet = EmbeddedEngine()  # the in-process engine, event by event, agrees with the replay
    in_process = [orjson.loads(encode_command(c)) for line in lines for c in fleet.handle_raw(line)]
    assert in_process == commands
    assert replay(b"\n".join(lines) + b"\n", "-").stdout == done.stdout
