"""`stallwatch top`'s tally of commands, without a broker (tests/streams reads a real topic)."""

from __future__ import annotations

import io

from stallwatch.cli.top import Tally
from stallwatch.contract.commands import encode_command
from stallwatch.engine.embedded import EmbeddedEngine
from tests.script import RunScript


def test_top_counts_coder_stalls_new_codes_and_workspace_versions():
    s = RunScript("coding", "coder", tools=[{"name": "bash"}], policy={"stall_stop_at": 4})
    for n in range(4):
        s.round_of(
            ("bash", {"command": f"sed -i s/{n}/x/ a.py"}, ""),
            ("bash", {"command": "python repro.py"}, "Error"),
        )
    tally = Tally()
    for result in EmbeddedEngine().replay(s.lines()):
        for command in result:
            tally.add(encode_command(command))
    out = io.StringIO()
    tally.render(out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "stops: 1   nudges: 1"
    assert "  no_effect               1" in lines
    assert "stopped for changes without effect: python repro.py 1" in lines
    assert "coder runs: 1 stall nudges; workspace version at stop: 8, max 8" in lines


def test_top_shows_what_observe_only_runs_would_have_had_apart_from_what_happened():
    from tests.engine.test_observe_only import looping_run

    tally = Tally()
    for script in (looping_run("watched", policy={"observe_only": True}), looping_run("guarded")):
        for result in EmbeddedEngine().replay(script.lines()):
            for command in result:
                tally.add(encode_command(command))
    out = io.StringIO()
    tally.render(out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "stops: 1   nudges: 1"  # the enforced run's only
    assert "would have stopped (observe-only): 1" in lines
    header = next(line for line in lines if line.strip().startswith("tool"))
    assert "would duplicate_call" in header and "would run_stopped" in header
    row = next(line for line in lines if line.strip().startswith("search")).split()
    columns = header.split()[1:]
    # allow, duplicate_call, run_stopped, would duplicate_call, would run_stopped: as written
    assert len(row) - 1 == len([c for c in columns if c != "would"])
    assert row[1:] == ["12", "1", "4", "1", "4"]  # six calls of each run ran as allowed
