"""The fleet app's pure parts, no broker: tallies checked and merged, windows, the three rules."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.events import EVENT_ADAPTER
from stallwatch.contract.incidents import Incident, incident_id
from stallwatch_streams.fleet.rules import IncidentRules, Outcome
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import InvalidTally, merge, new_partial, parse_tally, tally_key
from stallwatch_streams.fleet.window import BUCKET_RUNS_CAP, new_state
from tests.streams.fleet.harness import tally

CFG = FleetSettings(window_s=300.0, step_s=60.0)
T0 = 1_800_000_000.0  # a multiple of 60: window starts are easy to read


def _judge(partials: list[dict], clock: float = 0.0):
    rules, state, outcomes = IncidentRules(CFG), new_state("acme", "search"), []
    for p in partials:
        outcomes.append(rules.apply(state, p, clock))
    return rules, state, outcomes


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"nope", "not JSON"),
        (b"[]", '"v": 1'),
        (b'{"v": 1, "tool": "", "ts": 1}', "`tool`"),
        (b'{"v": 1, "tool": "s", "ts": "x"}', "`ts`"),
        (b'{"v": 1, "tool": "s", "ts": 1, "calls": 1, "failures": 2}', "more than `calls`"),
        (b'{"v": 1, "tool": "s", "ts": 1, "runs": [1]}', "`runs`"),
        (b'{"v": 1, "tool": "s", "ts": 1, "answers": [{"runs": []}]}', "`fingerprint`"),
    ],
)
def test_a_record_that_is_not_a_tally_is_refused_with_what_is_wrong(raw: bytes, error: str) -> None:
    with pytest.raises(InvalidTally, match=None) as caught:
        parse_tally(raw, None)
    assert error in str(caught.value)


def test_a_key_that_does_not_match_the_value_is_refused() -> None:
    raw = orjson.dumps(tally("search", T0))
    assert parse_tally(raw, tally_key("acme", "search"))["tool"] == "search"
    with pytest.raises(InvalidTally, match="record key"):
        parse_tally(raw, tally_key("other", "search"))


def test_fingerprints_and_argument_digests_are_bounded_to_a_digests_size() -> None:
    worker_digest, long_one = "9f" * 16, "x" * 128
    answers = [{"fingerprint": long_one, "runs": ["r1"], "args": [worker_digest, long_one, "X" * 32]}]
    parsed = parse_tally(orjson.dumps(tally("search", T0, runs=["r1"], answers=answers)), None)
    [answer] = parsed["answers"]
    assert answer["args"][0] == worker_digest, "a worker's digest is kept as it is"
    assert all(len(d) == 32 and int(d, 16) >= 0 for d in [answer["fingerprint"], *answer["args"]])
    assert answer["fingerprint"] == answer["args"][1], "the same text, the same digest"
    assert answer["runs"] == ["r1"], "run ids are kept: advisories name them"


def test_merging_caps_the_sets_and_counts_what_it_left_out() -> None:
    partial = new_partial("acme", "search", T0)
    for i in range(100):
        record = tally("search", T0 + i, runs=[f"r{i}"], calls=2, failures=1)
        merge(partial, parse_tally(orjson.dumps(record), None))
    assert (partial["calls"], partial["failures"], partial["ts"]) == (200, 100, T0 + 99)
    assert len(partial["runs"]) == 64 and partial["dropped"] == 36


def test_tool_failing_needs_five_runs_and_half_the_calls_failed() -> None:
    four = [tally("search", T0 + i, runs=[f"r{i}"], calls=2, failures=1) for i in range(4)]
    _, state, outcomes = _judge(four)
    assert not state["open"] and not any(o.opened for o in outcomes)
    mostly_fine = [*four, tally("search", T0 + 5, runs=["r4"], calls=10, failures=0)]
    _, state, _ = _judge(mostly_fine)
    assert not state["open"]
    _, state, outcomes = _judge([*four, tally("search", T0 + 5, runs=["r4"], calls=2, failures=1)])
    assert outcomes[-1].opened == ["tool_failing"]
    record = Incident.model_validate(next(iter(outcomes[-1].incidents.values())))
    # The first window holding the crossing tally's bucket is the one that opened it.
    assert record.opened_window_start == T0 - 240 and record.evidence.runs == 5
    assert record.incident_id == incident_id("acme", "search", "tool_failing", T0 - 240)


def test_tool_same_answer_needs_five_runs_and_five_different_args_for_one_fingerprint() -> None:
    def answer(run: int, arg: str) -> dict:
        return tally(
            "search",
            T0 + run,
            runs=[f"r{run}"],
            calls=1,
            answers=[{"fingerprint": "a" * 32, "runs": [f"r{run}"], "args": [arg]}],
        )

    _, state, _ = _judge([answer(i, "same-question") for i in range(8)])
    assert not state["open"]  # one question asked by many runs: a cache doing its job
    _, state, _ = _judge([answer(i, f"q{i}") for i in range(5)])
    assert list(state["open"]) == ["tool_same_answer"]


def test_tool_looping_counts_runs_stopped_naming_the_tool() -> None:
    _, state, outcomes = _judge([tally("search", T0 + i, runs=[f"r{i}"], stops=[f"r{i}"]) for i in range(5)])
    assert list(state["open"]) == ["tool_looping"]
    assert not any(o.advisories for o in outcomes)  # every run that used it was stopped


def test_an_incident_opens_once_is_updated_and_closes_after_a_quiet_window() -> None:
    failing = [tally("search", T0 + i, runs=[f"r{i}"], calls=1, failures=1) for i in range(5)]
    later = [tally("search", T0 + 120 + i, runs=[f"r{i}"], calls=1, failures=1) for i in range(5)]
    rules, state, outcomes = _judge(failing + later)
    assert sum(len(o.opened) for o in outcomes) == 1
    first_id = state["open"]["tool_failing"]["id"]
    # Held until the end of the last window that holds `later` alone: it starts at their bucket.
    held = T0 + 120 + 300
    assert state["open"]["tool_failing"]["held"] == held
    advisories = [a for o in outcomes for a in o.advisories]
    assert sorted(a["run_id"] for a in advisories) == [f"r{i}" for i in range(5)]
    for a in advisories:
        EVENT_ADAPTER.validate_python(a)
    # Healthy calls: windows stop holding; a quiet window of event time later, it closes.
    quiet = rules.apply(state, tally("search", held + 300 - 1, runs=["r9"], calls=1), 0.0)
    assert not quiet.closed
    closing = rules.apply(state, tally("search", held + 300, runs=["r9"], calls=1), 0.0)
    assert closing.closed == ["tool_failing"] and not state["open"]
    assert {a["incident"] for a in closing.advisories} == {"closed"}
    assert next(iter(closing.incidents.values()))["incident_id"] == first_id


def test_a_replay_of_the_same_tallies_derives_the_same_ids_and_advisories() -> None:
    failing = [tally("search", T0 + i, runs=[f"r{i}"], calls=1, failures=1) for i in range(6)]
    _, _, first = _judge(failing)
    _, _, second = _judge(failing)
    assert [a["event_id"] for o in first for a in o.advisories] == [
        a["event_id"] for o in second for a in o.advisories
    ]


def test_a_flood_of_runs_in_one_bucket_is_capped() -> None:
    _, state, _ = _judge([tally("search", T0, runs=[f"r{i}" for i in range(1000)], calls=1)])
    bucket = next(iter(state["buckets"].values()))
    assert len(bucket["runs"]) == BUCKET_RUNS_CAP and state["dropped"] > 0


def test_the_runs_told_of_one_incident_are_capped():
    rules = IncidentRules(FleetSettings(window_s=300.0, step_s=60.0, max_advised_runs=3))
    state, advisories = new_state("acme", "search"), []
    for i in range(10):
        outcome = rules.apply(state, tally("search", T0 + i, runs=[f"r{i}"], calls=1, failures=1), 0.0)
        advisories += outcome.advisories
    assert sorted(a["run_id"] for a in advisories) == ["r0", "r1", "r2"]
    assert state["open"]["tool_failing"]["advised"] == ["r0", "r1", "r2"]


def test_one_failed_result_among_runs_still_waiting_on_theirs_opens_nothing():
    waiting = [f"r{i}" for i in range(6)]  # six runs proposed; one result is in, a failure
    _, state, _ = _judge([tally("search", T0, runs=waiting, calls=1, failures=1)])
    assert not state["open"]
    # Their results come in failing: half the runs' calls have failed, and it opens.
    _, state, _ = _judge(
        [
            tally("search", T0, runs=waiting, calls=1, failures=1),
            tally("search", T0 + 1, runs=waiting[:2], calls=2, failures=2),
        ]
    )
    assert list(state["open"]) == ["tool_failing"]


def test_an_evicted_key_closes_its_open_incidents_and_tells_the_runs_told_it_opened():
    # Evicted for room, a key's windows are gone: no quiet window would close its incident, and
    # runs under fleet_breaker would be refused the tool for good.
    rules, state, _ = _judge([tally("search", T0 + i, runs=[f"r{i}"], calls=1, failures=1) for i in range(5)])
    opened = state["open"]["tool_failing"]
    closing = Outcome()
    rules.close_evicted(state, T0 + 30, closing)
    assert closing.closed == ["tool_failing"] and not state["open"]
    record = Incident.model_validate(closing.incidents[opened["id"]])
    assert record.state == "closed" and record.closed_at == opened["held"]  # never before held
    assert sorted(a["run_id"] for a in closing.advisories) == [f"r{i}" for i in range(5)]
    assert {a["incident"] for a in closing.advisories} == {"closed"}
    for a in closing.advisories:
        EVENT_ADAPTER.validate_python(a)


def test_an_evicted_incident_closes_at_the_clock_once_its_last_window_has_passed():
    rules, state, _ = _judge([tally("search", T0 + i, runs=[f"r{i}"], calls=1, failures=1) for i in range(5)])
    held = state["open"]["tool_failing"]["held"]
    closing = Outcome()
    rules.close_evicted(state, held + 42, closing)
    assert next(iter(closing.incidents.values()))["closed_at"] == held + 42
