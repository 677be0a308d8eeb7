"""A run's state survives the trip through bytes (the changelog) unchanged, and stays small."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.engine.state import STATE_FORMAT, RunState
from tests.script import RunScript

DOCS = {"documents": [{"id": "secret-document", "body": "the password is hunter2"}]}


def state_after(script: RunScript, run) -> RunState:
    return run(script).fleet.runs[script.run_id]


def test_a_state_round_trips_through_bytes(run):
    s = RunScript(mode="chat", tools=[{"name": "price"}, {"name": "wait", "repeat_exempt": True}],
                  policy={"cycle_threshold": 2})
    s.start_round()
    for i in range(3):
        s.call("price", {"s": i % 2}, status="error" if i else "ok", result={"p": i})
    researcher = RunScript("r2", tools=[{"name": "search", "facts": {"path": "documents", "key": "id"}}])
    for i in range(3):
        researcher.round_of(("search", {"q": i}, DOCS))
    for script in (s, researcher):
        state = state_after(script, run)
        assert RunState.from_bytes(state.to_bytes()) == state


def test_no_result_content_reaches_the_state(run):
    s = RunScript()
    for i in range(3):
        s.round_of(("search", {"q": i}, DOCS))
    raw = state_after(s, run).to_bytes()
    assert b"hunter2" not in raw and b"secret-document" not in raw


def test_a_state_in_another_format_is_refused_with_a_clear_error(run):
    values = orjson.loads(state_after(RunScript(), run).to_bytes())
    values[0] = STATE_FORMAT + 1
    with pytest.raises(ValueError, match="format"):
        RunState.from_bytes(orjson.dumps(values))
