"""The parser's quick check is sound: whatever it lets through, the pydantic models accept too."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stallwatch.contract.events import EVENT_ADAPTER
from stallwatch.contract.parse import _conforms

anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False),
                     st.text(max_size=3), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
statuses = st.sampled_from(["ok", "error", "overloaded", "OK", ""]) | anything
field_values = {
    "event_id": st.text(max_size=3) | anything, "run_id": st.text(max_size=3) | anything,
    "ts": st.floats(allow_nan=False) | st.integers() | anything,
    "round": st.integers(-2, 5) | anything, "call_id": st.text(max_size=3) | anything,
    "tool": st.text(max_size=3) | anything, "status": statuses, "args": anything,
    "result": anything, "fingerprint": st.text(max_size=4) | anything, "empty": anything,
    "reason": anything, "args_digest": st.text(max_size=4) | anything,
    "effect": st.sampled_from(["read", "write", "unknown", "READ", ""]) | anything,
}
kinds = st.sampled_from(["round_started", "round_ended", "call_proposed", "call_result",
                         "run_ended", "run_started"])


@st.composite
def events(draw):
    kind = draw(kinds)
    present = draw(st.lists(st.sampled_from(sorted(field_values)), unique=True))
    event = {"v": 1, "type": kind}
    for name in present:
        event[name] = draw(field_values[name])
    return kind, event


@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
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
