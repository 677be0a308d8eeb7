"""The parser's quick check is sound: whatever it lets through, the pydantic models accept too."""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stallwatch.contract import parse
from stallwatch.contract.events import EVENT_ADAPTER
from stallwatch.contract.parse import _conforms, _plain_run_started

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
statuses = st.sampled_from(["ok", "error", "overloaded", "OK", ""]) | anything
field_values = {
    "event_id": st.text(max_size=3) | anything,
    "run_id": st.text(max_size=3) | anything,
    "ts": st.floats(allow_nan=False) | st.integers() | anything,
    "round": st.integers(-2, 5) | anything,
    "call_id": st.text(max_size=3) | anything,
    "tool": st.text(max_size=3) | anything,
    "status": statuses,
    "args": anything,
    "result": anything,
    "fingerprint": st.text(max_size=4) | anything,
    "empty": anything,
    "reason": anything,
    "args_digest": st.text(max_size=4) | anything,
    "effect": st.sampled_from(["read", "write", "unknown", "READ", ""]) | anything,
}
kinds = st.sampled_from(
    ["round_started", "round_ended", "call_proposed", "call_result", "run_ended", "run_started"]
)

# Examples per property: a fixed budget in the pure lane, where these are among the costliest tests;
# `make fuzz` (HYPOTHESIS_PROFILE=fuzz) runs ten times as many.
EXAMPLES = 5000 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 500


@st.composite
def events(draw):
    kind = draw(kinds)
    present = draw(st.lists(st.sampled_from(sorted(field_values)), unique=True))
    event = {"v": 1, "type": kind}
    for name in present:
        event[name] = draw(field_values[name])
    return kind, event


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(events())
def test_the_quick_check_accepts_nothing_the_models_reject(case):
    kind, event = case
    if _conforms(event, kind):
        try:
            model = EVENT_ADAPTER.validate_python(event)
        except ValidationError as exc:
            raise AssertionError(f"quick check let through {event}: {exc}") from None
        for name, value in model.model_dump(exclude_unset=True).items():
            assert value == event[name], name


tool_values = st.fixed_dictionaries(
    {"name": st.text(max_size=3) | anything},
    optional={
        "repeat_exempt": st.booleans() | anything,
        "requires_approval": st.booleans() | anything,
        "effect": st.sampled_from(["read", "write"]) | anything,
        "volatile_fields": st.lists(st.text(max_size=2), max_size=1),
    },
)
run_started_values = {
    "event_id": st.text(max_size=3) | anything,
    "run_id": st.text(max_size=3) | anything,
    "ts": st.floats(allow_nan=False) | st.integers() | anything,
    "mode": st.sampled_from(["researcher", "chat", "coder", "CHAT"]) | anything,
    "tools": st.lists(tool_values | anything, max_size=3) | anything,
    "policy": st.just({}) | st.just({"max_rounds": 3}) | anything,
    "parent_run_id": st.text(max_size=3) | anything,
    "tenant": st.text(max_size=3) | anything,
    "extra": anything,
}


@st.composite
def run_started_events(draw):
    present = draw(st.lists(st.sampled_from(sorted(run_started_values)), unique=True))
    event = {"v": 1, "type": "run_started"}
    for name in present:
        event[name] = draw(run_started_values[name])
    return event


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(run_started_events())
def test_a_plain_run_started_passes_only_as_the_models_would_give_it(event):
    """What the quick check lets through is the models' own output, types included (a `ts`
    of 5 would be 5.0 from pydantic, so an integer ts goes to pydantic)."""
    if _plain_run_started(event):
        try:
            model = EVENT_ADAPTER.validate_python(event)
        except ValidationError as exc:
            raise AssertionError(f"quick check let through {event}: {exc}") from None
        assert orjson.dumps(
            model.model_dump(exclude_unset=True), option=orjson.OPT_SORT_KEYS
        ) == orjson.dumps(event, option=orjson.OPT_SORT_KEYS)


def test_a_plain_run_started_is_not_handed_to_pydantic(monkeypatch):
    """A fleet log's run_started events in their common shape: pydantic cost ~40 µs each."""
    plain = {
        "v": 1,
        "type": "run_started",
        "event_id": "e",
        "run_id": "r",
        "ts": 1.5,
        "mode": "researcher",
        "tenant": "t",
        "tools": [{"name": "search"}, {"name": "wait", "repeat_exempt": True}],
    }

    class Refuses:
        def validate_python(self, data: object) -> None:
            raise AssertionError("validated in full")

    monkeypatch.setattr(parse, "EVENT_ADAPTER", Refuses())
    assert parse.parse_event(orjson.dumps(plain)) == plain
    with pytest.raises(AssertionError, match="validated in full"):  # not plain: a policy
        parse.parse_event(orjson.dumps({**plain, "policy": {"max_rounds": 3}}))
