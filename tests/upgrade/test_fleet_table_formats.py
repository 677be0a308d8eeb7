"""The fleet table's values across the previous release and this one: each release judges the
other's values exactly as its own (the same incidents opened and closed, the same value after)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.upgrade.previous_release import previous_release_python

# Run by either release's interpreter: a (tenant, tool) key's value from stdin (null: a new one,
# as that release makes it), then a run of failing calls judged step by step.
JUDGE = """
import json, sys
from stallwatch.settings import Settings
from stallwatch_streams.fleet import rules
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.window import new_state

given = json.loads(sys.stdin.read())
state = new_state("acme", "search") if given is None else given
# The previous release names the rules `Judge`.
IncidentRules = getattr(rules, "IncidentRules", None) or getattr(rules, "Judge")
judge = IncidentRules(FleetSettings(base=Settings()))
steps = []
for i in range(int(sys.argv[1]), int(sys.argv[2])):
    partial = {
        "v": 1, "tenant": "acme", "tool": "search", "ts": 1000.0 + 10 * i, "calls": 3,
        "failures": 3 if i < 30 else 0, "runs": [f"run-{i % 9}"], "stops": [], "answers": [],
        "dropped": 0,
    }
    outcome = judge.apply(state, partial, partial["ts"])
    steps.append([sorted(outcome.opened), sorted(outcome.closed), sorted(outcome.incidents)])
print(json.dumps({"state": state, "steps": steps}))
"""


def judged(python: Path | str, state: dict | None, first: int, last: int) -> dict:
    done = subprocess.run(
        [str(python), "-c", JUDGE, str(first), str(last)],
        input=json.dumps(state),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(python).parents[2] if python != sys.executable else None,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def previous() -> Path:
    return previous_release_python()


def without_format(state: dict) -> dict:
    return {k: v for k, v in state.items() if k != "format"}


@pytest.mark.parametrize("writer", ["previous", "this"])
def test_each_release_judges_the_others_table_values_as_its_own(previous: Path, writer: str):
    pythons = {"previous": previous, "this": sys.executable}
    reader = "this" if writer == "previous" else "previous"
    written = judged(pythons[writer], None, 0, 20)
    assert any(step[0] for step in written["steps"]), "the first half opens an incident"
    by_reader = judged(pythons[reader], written["state"], 20, 200)
    by_writer = judged(pythons[writer], written["state"], 20, 200)
    assert by_reader["steps"] == by_writer["steps"]
    assert any(step[1] for step in by_reader["steps"]), "the second half closes it"
    assert without_format(by_reader["state"]) == without_format(by_writer["state"])
