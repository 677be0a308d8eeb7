"""The worker's per-batch tallies per (tenant, tool), computed without a broker. A tenant's runs
are read from its own events topic (acme's here, unless a test says otherwise), which gives
them their tenant."""

from __future__ import annotations

import orjson

from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import call_signature, derive_secret, fact_digest
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.tallies import MAX_RUN_IDS, Tallies, tally_key
from tests.script import RunScript

STALE = {"docs": ["the fallback page"]}


ACME_EVENTS = "stallwatch.tenant.acme.events"


def script(run_id: str, **kwargs) -> RunScript:
    return RunScript(run_id, **kwargs)


def batch(*scripts: RunScript) -> list[SourceMessage]:
    out = []
    for s in scripts:
        out += [SourceMessage(s.run_id.encode(), line, 0, 0) for line in s.lines()]
    return [SourceMessage(m.key, m.value, 0, i) for i, m in enumerate(out)]


def apply(
    messages: list[SourceMessage],
    tallies: Tallies | None = None,
    detector: Detector | None = None,
    states: dict[str, RunState] | None = None,
    tenant: str | None = "acme",
) -> dict[bytes, dict]:
    tallies = tallies or Tallies()
    topic = "stallwatch.events" if tenant is None else f"stallwatch.tenant.{tenant}.events"
    applier = BatchApplier(detector or Detector(), topic, tallies=tallies, tenant=tenant)
    result = applier.apply(messages, lambda run_id: (states or {}).get(run_id), PartitionClock(), 0.0)
    if states is not None:
        states.update(result.states)
    records = dict(result.tallies)
    assert len(records) == len(result.tallies)  # one record per (tenant, tool)
    return {key: orjson.loads(value) for key, value in records.items()}


def test_calls_failures_and_runs_per_tenant_and_tool():
    a, b, c = script("a"), script("b"), script("c")
    for s, status in ((a, "error"), (b, "ok"), (c, "overloaded")):
        s.start_round()
        s.call("search", {"q": s.run_id}, status=status, result={"docs": [s.run_id]})
        s.call("fetch", {"u": 1})  # proposed, no result yet
    records = apply(batch(a, b)) | apply(batch(c), tenant=None)  # c on the shared topic
    assert set(records) == {b"acme\x1fsearch", b"acme\x1ffetch", b"\x1fsearch", b"\x1ffetch"}
    search = records[tally_key("acme", "search")]
    assert (search["v"], search["tenant"], search["tool"]) == (1, "acme", "search")
    assert (search["calls"], search["failures"], search["runs"]) == (2, 1, ["a", "b"])
    assert search["ts"] == max(a.events[-2]["ts"], b.events[-2]["ts"])
    assert records[tally_key("acme", "fetch")]["calls"] == 0
    assert records[tally_key("acme", "fetch")]["runs"] == ["a", "b"]
    assert records[b"\x1fsearch"]["failures"] == 1 and records[b"\x1fsearch"]["tenant"] is None


def test_one_answer_to_many_questions_lists_its_runs_and_argument_digests():
    runs = [script(f"r{i}") for i in range(3)]
    for i, s in enumerate(runs):
        s.start_round()
        s.call("search", {"q": f"question {i}"}, status="ok", result=STALE)
    [answer] = apply(batch(*runs))[tally_key("acme", "search")]["answers"]
    assert answer["fingerprint"] == fact_digest(STALE).hex()
    assert answer["runs"] == ["r0", "r1", "r2"]
    assert answer["args"] == [call_signature("search", {"q": f"question {i}"}).hex() for i in range(3)]


def test_digests_are_keyed_with_the_fleets_key_and_no_content_leaves():
    s = script("r1")
    s.start_round()
    s.call("search", {"q": "my pin is 4821"}, status="ok", result={"pin": "4821"})
    secret = derive_secret("a fleet key of enough length")
    raw = (
        BatchApplier(Detector(secret=secret), ACME_EVENTS, tallies=Tallies(secret), tenant="acme")
        .apply(batch(s), lambda run_id: None, PartitionClock(), 0.0)
        .tallies
    )
    [(_, value)] = raw
    assert b"4821" not in value
    [answer] = orjson.loads(value)["answers"]
    assert answer["fingerprint"] == fact_digest({"pin": "4821"}, secret).hex()
    assert answer["fingerprint"] != fact_digest({"pin": "4821"}).hex()
    assert answer["args"] == [call_signature("search", {"q": "my pin is 4821"}, secret).hex()]


def test_runtime_digests_are_taken_as_the_engine_takes_them():
    s = script("r1")
    s.start_round()
    s.add("call_proposed", round=1, call_id="c9", tool="search", args_digest="ab" * 16)
    s.add(
        "call_result", round=1, call_id="c9", tool="search", status="ok", fingerprint="cd" * 16, empty=False
    )
    [answer] = apply(batch(s))[tally_key("acme", "search")]["answers"]
    assert answer == {"fingerprint": "cd" * 16, "runs": ["r1"], "args": ["ab" * 16]}


def test_empty_results_approval_and_exempt_tools_never_answer():
    s = script(
        "r1",
        tools=[
            {"name": "search"},
            {"name": "send", "requires_approval": True},
            {"name": "poll", "repeat_exempt": True},
            {"name": "admin_tool"},
        ],
    )
    s.start_round()
    s.call("search", {"q": 1}, status="ok", result=[])
    s.add("call_proposed", round=1, call_id="c8", tool="search", args={"q": 2})
    s.add("call_result", round=1, call_id="c8", tool="search", status="ok", fingerprint="ee" * 16, empty=True)
    s.call("send", {"to": 1}, status="ok", result=STALE)
    s.call("poll", {"id": 1}, status="ok", result=STALE)
    s.call("admin_tool", {"id": 1}, status="ok", result=STALE)
    detector = Detector(AdminPolicy(approval_patterns=("admin_*",)))
    records = apply(batch(s), Tallies(admin_policy=detector.admin_policy), detector)
    assert all(r["answers"] == [] for r in records.values())
    assert [records[tally_key("acme", t)]["calls"] for t in ("search", "send", "poll", "admin_tool")] == [
        2,
        1,
        1,
        1,
    ]


def test_the_argument_digest_of_a_call_proposed_in_an_earlier_batch():
    s = script("r1")
    s.start_round()
    s.call("search", {"q": 1})
    tallies, states = Tallies(), {}
    apply(batch(s), tallies, states=states)
    s.add("call_result", round=1, call_id="c1", tool="search", status="ok", result=STALE)
    later = [SourceMessage(b"r1", s.lines()[-1], 0, 10)]
    [answer] = apply(later, tallies, states=states)[tally_key("acme", "search")]["answers"]
    assert answer["args"] == [call_signature("search", {"q": 1}).hex()]


def test_stops_name_the_failing_tool_and_the_refused_one():
    failing = script("failing", policy={"no_progress_threshold": 2})
    failing.start_round()
    failing.call("search", {"q": 1}, status="error", result={"e": 1})
    failing.call("search", {"q": 2}, status="error", result={"e": 1})
    refusing = script("refusing", policy={"no_progress_threshold": 2})
    refusing.round_of(("fetch", {"u": 1}, {"page": 1}))
    for _ in range(2):
        refusing.start_round()
        refusing.call("fetch", {"u": 1})  # refused: a duplicate
        refusing.end_round()
    records = apply(batch(failing, refusing))
    assert records[tally_key("acme", "search")]["stops"] == ["failing"]
    assert records[tally_key("acme", "fetch")]["stops"] == ["refusing"]


def test_caps_count_what_they_leave_out():
    runs = []
    for i in range(MAX_RUN_IDS + 10):
        s = script(f"r{i}")
        s.start_round()
        s.call("search", {"q": i}, status="ok", result=STALE)
        runs.append(s)
    record = apply(batch(*runs))[tally_key("acme", "search")]
    assert record["calls"] == MAX_RUN_IDS + 10 and len(record["runs"]) == MAX_RUN_IDS
    [answer] = record["answers"]
    assert len(answer["runs"]) == MAX_RUN_IDS and len(answer["args"]) == 16
    # Each addition left out counts: the 10 runs past the cap at their call and at their result,
    # in the answer's runs, and the argument digests past 16.
    assert record["dropped"] == 10 + 10 + 10 + (MAX_RUN_IDS + 10 - 16)


def test_each_batch_has_its_own_records_and_advisories_count_nothing():
    s = script("r1")
    s.start_round()
    s.call("search", {"q": 1}, status="ok", result=STALE)
    tallies, states = Tallies(), {}
    assert apply(batch(s), tallies, states=states)[tally_key("acme", "search")]["calls"] == 1
    advisory = {
        "v": 1,
        "type": "fleet_advisory",
        "event_id": "fa-1",
        "run_id": "r1",
        "ts": 9.0,
        "incident_id": "inc-1",
        "incident": "open",
        "kind": "tool_failing",
        "tool": "search",
        "window_s": 300.0,
    }
    assert apply([SourceMessage(b"r1", orjson.dumps(advisory), 0, 10)], tallies, states=states) == {}


def test_without_tallies_the_batch_has_none():
    s = script("r1")
    s.start_round()
    s.call("search", {"q": 1}, status="ok", result=STALE)
    result = BatchApplier(Detector(), "events").apply(batch(s), lambda run_id: None, PartitionClock(), 0.0)
    assert result.tallies == []


def test_an_observed_runs_would_have_stops_are_tallied_as_stops():
    """The fleet layer's incidents open from observe-only runs as from enforced ones."""
    failing = script("failing", policy={"no_progress_threshold": 2, "observe_only": True})
    failing.start_round()
    failing.call("search", {"q": 1}, status="error", result={"e": 1})
    failing.call("search", {"q": 2}, status="error", result={"e": 1})
    refusing = script("refusing", policy={"no_progress_threshold": 2, "observe_only": True})
    refusing.round_of(("fetch", {"u": 1}, {"page": 1}))
    for _ in range(2):
        refusing.start_round()
        refusing.call("fetch", {"u": 1}, status="ok", result={"page": 1})  # would be refused: it ran
        refusing.end_round()
    records = apply(batch(failing, refusing))
    assert records[tally_key("acme", "search")]["stops"] == ["failing"]
    assert records[tally_key("acme", "fetch")]["stops"] == ["refusing"]
