"""A run's state survives the trip through bytes (the changelog) unchanged, and stays small."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.limits import MAX_DECLARATIONS_BYTES, MAX_ID_CHARS, MAX_RECORD_BYTES
from stallwatch.contract.parse import parse_event
from stallwatch.contract.policy import POLICY_FIELDS, V1_DEFAULTS
from stallwatch.engine.detector import Detector
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.rules.workspace import LABEL_CHARS, MAX_CALL_HISTORY, MAX_OPEN_CALLS
from stallwatch.engine.state import (
    EVENT_WINDOW,
    MAX_CHAT_HISTORY,
    MAX_FAILING_TOOLS,
    MAX_FINGERPRINTS,
    MAX_SIGNATURES,
    STATE_FORMAT,
    RunPolicy,
    RunState,
)
from tests.script import RunScript

DOCS = {"documents": [{"id": "secret-document", "body": "the password is hunter2"}]}


def state_after(script: RunScript, run) -> RunState:
    return run(script).engine.runs[script.run_id]


def test_the_run_policy_has_the_contract_policys_fields_in_order_with_its_defaults():
    # The state stores the policy's values in this order, and detector builds it by field name.
    assert RunPolicy._fields == POLICY_FIELDS
    assert RunPolicy._field_defaults == dict(V1_DEFAULTS)


def test_a_state_round_trips_through_bytes(run):
    s = RunScript(
        mode="chat",
        tools=[{"name": "price"}, {"name": "wait", "repeat_exempt": True}],
        policy={"cycle_threshold": 2},
    )
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


# A researcher run's state as the format 3 worker wrote it (before fleet advisories and broker
# time): max_rounds 9, one round of one search, then a failing search; 7 hours of clock offset.
FORMAT_3_STATE = (
    b'[3,"researcher",1000.0,5,3,9,null,3,null,3,null,null,null,[],[],{},2,true,1,1,1,true,false,'
    b'0,false,0,2,0,0,{"search":1},null,0,[],{},0,{},{},"yyV9yuGrouYZIkito/pxaJpKG0oEflsT6WiujOMK3k8='
    b'","CvYHFzDa4iKbWPBbrcnqqRYTL2zrHaGKEr8OviEKCe0=","kA7dJgoSMVjmX0EWBy0XRmOZ92MqRxHh7vp5Y58emYe+F'
    b'GkpbLbJb4d9lZttn8Yj52XeG4lNJmpjAzAjrNAnrw==",null,false,1003.5,41,-25200.0]'
)


def test_a_state_of_the_clock_offset_format_is_read_with_no_broker_time():
    read = RunState.from_bytes(FORMAT_3_STATE)
    assert read.seen_at is None and read.started_ts == 1000.0 and read.last_offset == 41
    assert read.policy.max_rounds == 9 and read.policy.fleet_breaker is False
    assert read.advised == [] and read.fleet_incidents == {} and read.failures == {"search": 1}
    assert len(read.signatures) == 2 and len(read.event_ids) == 8 and read.round == 2
    assert RunState.from_bytes(read.to_bytes()) == read


def test_a_run_not_observe_only_is_written_in_the_format_before_and_read_as_not_observing():
    state = RunState.from_bytes(FORMAT_3_STATE)
    written = orjson.loads(state.to_bytes())
    assert written[0] == 5  # what the release before reads: a rollback keeps the run
    read = RunState.from_bytes(state.to_bytes())
    assert read.policy.observe_only is False and read == state
    observing = RunState(mode="researcher", started_ts=1.0, policy=RunPolicy(observe_only=True))
    assert orjson.loads(observing.to_bytes())[0] == STATE_FORMAT == 6
    assert RunState.from_bytes(observing.to_bytes()).policy.observe_only is True


def test_a_state_of_the_format_before_tenants_is_read_with_no_tenant():
    format_4 = orjson.loads(RunState.from_bytes(FORMAT_3_STATE).to_bytes())[:-1]
    format_4[0] = 4  # what the format 4 worker wrote: the same fields but the tenant
    read = RunState.from_bytes(orjson.dumps(format_4))
    assert read.tenant is None and read.last_offset == 41 and read.policy.max_rounds == 9


def test_the_tenant_is_kept_bounded_and_round_trips(run):
    script = RunScript()
    script.events[0]["tenant"] = "acme"
    state = state_after(script, run)
    assert state.tenant == "acme" and RunState.from_bytes(state.to_bytes()).tenant == "acme"
    script = RunScript()
    script.events[0]["tenant"] = "t" * 1000
    assert len(state_after(script, run).tenant) <= 128


def test_a_100000_event_run_keeps_a_small_state():
    """No per-event id kept forever: the state of a long run stops growing (a state keeping
    every id passes 1 MB by 96,000 events, past the producer's limit on a record)."""
    s = RunScript(
        tools=[{"name": "search"}, {"name": "wait", "repeat_exempt": True}],
        policy={"max_rounds": 100_000, "no_progress_threshold": 100_000},
    )
    fleet, applied, sizes = EmbeddedEngine(), 0, []
    while applied < 100_000:
        s.start_round()
        for _ in range(4):
            s.call("wait", {"for": "child"}, status="ok", result={"done": False})
        s.end_round()
        for event in s.events[applied:]:
            assert fleet.handle(parse_event(orjson.dumps(event))) != [] or event["type"] != "call_proposed"
        applied = len(s.events)
        if applied % 10_000 < 10:
            sizes.append(len(fleet.runs[s.run_id].to_bytes()))
    state = fleet.runs[s.run_id]
    assert EVENT_WINDOW * 3 // 4 < len(state.event_ids) <= EVENT_WINDOW and state.stop_code is None
    assert len(sizes) >= 9 and max(sizes) < 20_000


def test_a_state_with_every_cap_reached_stays_under_the_record_limit():
    name = "\x01" * MAX_ID_CHARS  # the longest name, each character escaped in JSON
    tools: list[dict] = []
    while len(orjson.dumps(tools)) < MAX_DECLARATIONS_BYTES - 8 * MAX_ID_CHARS:
        tools.append(
            {
                "name": f"{len(tools):04}{name[4:]}",
                "repeat_exempt": True,
                "requires_approval": True,
                "volatile_fields": [name],
            }
        )
    start = {
        "v": 1,
        "type": "run_started",
        "event_id": "e",
        "run_id": "r",
        "ts": 0.0,
        "mode": "chat",
        "tools": tools,
        "policy": {"cycle_threshold": 1_000},
    }
    state, _ = Detector().apply(None, parse_event(orjson.dumps(start)))
    for i in range(MAX_SIGNATURES + 10):
        state.add_signature(i.to_bytes(16, "big"))
    for i in range(MAX_FINGERPRINTS + 10):
        state.add_fingerprint(i.to_bytes(16, "big"))
    for i in range(EVENT_WINDOW + 10):
        state.seen_event(i)
    for i in range(MAX_FAILING_TOOLS + 10):
        state.count_failure(f"{i:04}{name[4:]}")
    state.chat_history = [["0" * 32, "0" * 32, name, name]] * MAX_CHAT_HISTORY
    assert len(state.signatures) <= MAX_SIGNATURES and len(state.fingerprints) <= MAX_FINGERPRINTS
    assert len(state.failures) == MAX_FAILING_TOOLS
    for i in range(MAX_SIGNATURES - len(state.signatures)):  # fill up to the caps again
        state.add_signature((10**6 + i).to_bytes(16, "big"))
    for i in range(MAX_FINGERPRINTS - len(state.fingerprints)):
        state.add_fingerprint((10**6 + i).to_bytes(16, "big"))
    for i in range(EVENT_WINDOW - len(state.event_ids)):
        state.seen_event(10**6 + i)
    assert (len(state.signatures), len(state.fingerprints), len(state.event_ids)) == (
        MAX_SIGNATURES,
        MAX_FINGERPRINTS,
        EVENT_WINDOW,
    )
    # Coder mode's own bounded bookkeeping, full too, with the longest labels.
    label = "\x01" * LABEL_CHARS
    state.open_calls = {
        f"{i:04}{name[4:]}": ["0" * 32, "unknown", 10**9, label] for i in range(MAX_OPEN_CALLS)
    }
    state.call_history = {f"{i:032x}": ["0" * 32, 10**9, 10**9, 10**9] for i in range(MAX_CALL_HISTORY)}
    assert len(state.to_bytes()) < MAX_RECORD_BYTES


def test_past_a_cap_the_oldest_goes_and_a_state_read_back_evicts_the_same(run):
    state = RunState(mode="researcher", started_ts=0.0)
    for i in range(MAX_FINGERPRINTS):
        state.add_fingerprint(i.to_bytes(16, "big"))
    copy = RunState.from_bytes(state.to_bytes())
    for s in (state, copy):
        assert s.add_fingerprint(b"\xff" * 16)  # evicts the oldest quarter, fingerprint 0 first
        assert s.add_fingerprint((0).to_bytes(16, "big"))  # seen long ago: new again (keep going)
        assert not s.add_fingerprint((MAX_FINGERPRINTS - 5).to_bytes(16, "big"))  # recent: kept
        assert len(s.fingerprints) <= MAX_FINGERPRINTS
    assert copy == state


def test_an_old_call_evicted_from_a_long_run_may_run_once_more(run):
    s = RunScript(policy={"max_rounds": 10_000})
    s.start_round()
    for i in range(MAX_SIGNATURES + 1):
        s.call("search", {"q": i})
    s.call("search", {"q": 0})  # evicted: allowed again
    s.call("search", {"q": MAX_SIGNATURES - 2})  # recent, still held: refused
    assert run(s).codes()[-2:] == [None, "duplicate_call"]
