"""One event cannot halt or stall the engine: declarations the engine can always run, work per
event bounded by its size, and a fault kept with its event (the run quarantined, every other run
untouched), in replay and in the worker's batch step alike."""

from __future__ import annotations

import io
import re
import time

import orjson
import pytest

from stallwatch.cli.replay import replay
from stallwatch.contract.commands import encode_command
from stallwatch.contract.parse import InvalidEvent, parse_event
from stallwatch.engine import canonical
from stallwatch.engine.canonical import declared_view, without_volatile
from stallwatch.engine.detector import Detector
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.rules.researcher import ResearcherRules
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from tests.script import RunScript

# A result's size near the broker's limit (1 MB events): what a hostile declaration meets.
BIG = 900_000


def healthy_runs(count: int = 6) -> list[RunScript]:
    """Runs with a loop in each (a repeat refused, a stop after five stale rounds)."""
    runs = []
    for n in range(count):
        s = RunScript(f"healthy-{n}")
        for _ in range(7):
            s.round_of(("search", {"q": "same"}, {"items": [{"id": 1}]}))
        runs.append(s)
    return runs


def interleaved(*scripts: RunScript) -> list[bytes]:
    """The scripts' events, one of each in turn (as runs interleave on a partition)."""
    queues = [list(s.events) for s in scripts]
    lines = []
    while any(queues):
        for queue in queues:
            if queue:
                lines.append(orjson.dumps(queue.pop(0)))
    return lines


def replayed(lines: list[bytes]) -> tuple[list[dict], list[dict]]:
    out, err = io.BytesIO(), io.BytesIO()
    replay(io.BytesIO(b"\n".join(lines) + b"\n"), out, err)
    return (
        [orjson.loads(x) for x in out.getvalue().splitlines()],
        [orjson.loads(x) for x in err.getvalue().splitlines()],
    )


def of_runs(commands: list[dict], prefix: str) -> list[dict]:
    return [c for c in commands if c["run_id"].startswith(prefix)]


def hostile_run(tools: list[dict], result: object, run_id: str = "hostile") -> RunScript:
    s = RunScript(run_id, tools=tools)
    s.round_of(("search", {"q": "x"}, result))
    s.round_of(("search", {"q": "y"}, result))
    return s


# -- what is validated is what runs ----------------------------------------------------------------


@pytest.mark.parametrize(
    "patterns",
    [
        ["\\d+ms", "(?i)token"],  # a flag not at the start of the joined pattern
        ["(?P<t>a)", "(?P<t>b)"],  # one group name twice
    ],
)
def test_patterns_that_validate_are_applied_to_every_result(patterns):
    tools = [{"name": "search", "volatile_patterns": patterns}]
    hostile = hostile_run(tools, "a TOKEN 12ms b")
    commands, letters = replayed(interleaved(hostile, *healthy_runs()))
    assert letters == []
    assert len(of_runs(commands, "hostile")) == 2  # both calls answered: the run was applied
    assert of_runs(commands, "healthy") == replayed(interleaved(*healthy_runs()))[0]


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("(?<=bash: )\\d+", "invalid perl operator"),  # lookbehind: not in RE2
        ("(a)\\1", "invalid escape sequence"),  # a backreference
        ("a{1001}", "invalid repetition size"),
    ],
)
def test_a_pattern_re2_cannot_run_refuses_its_run_started_naming_the_field(pattern, why):
    event = RunScript("r", tools=[{"name": "search", "volatile_patterns": [pattern]}]).events[0]
    with pytest.raises(InvalidEvent) as caught:
        parse_event(orjson.dumps(event))
    assert "tools.0.volatile_patterns" in str(caught.value) and why in str(caught.value)


# -- bounded work per event ------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["(a+)+$", "(x+x+)+y", "(a|aa)+$"])
def test_a_catastrophic_pattern_masks_a_large_result_in_linear_time(pattern):
    tools = [{"name": "search", "volatile_patterns": [pattern]}]
    for size in (40, BIG):
        started = time.process_time()
        declared_view("search", "a" * size + "!", [], None, (pattern,))
        assert time.process_time() - started < 2.0  # backtracking took 21 s at 28 characters
    hostile = hostile_run(tools, "a" * 40 + "!")
    commands, letters = replayed(interleaved(hostile, *healthy_runs()))
    assert letters == [] and len(of_runs(commands, "hostile")) == 2


def test_volatile_paths_are_capped_and_walk_the_result_once(monkeypatch):
    too_many = [{"name": "search", "volatile_fields": [f"*.*.*.z{n}" for n in range(65)]}]
    with pytest.raises(InvalidEvent, match="volatile_fields"):
        parse_event(orjson.dumps(RunScript("r", tools=too_many).events[0]))
    paths = tuple(f"*.*.*.z{n}" for n in range(64))
    result = {
        f"k{i}": {f"m{j}": {f"n{k}": {"z1": 1, "keep": 2} for k in range(30)} for j in range(30)}
        for i in range(30)
    }  # 27,000 leaves
    visits = []
    real = canonical._strip

    def counted(value, nodes):
        visits.append(len(nodes))
        return real(value, nodes)

    monkeypatch.setattr(canonical, "_strip", counted)
    stripped = without_volatile(result, paths)
    assert stripped["k0"]["m0"]["n0"] == {"keep": 2} and result["k0"]["m0"]["n0"]["z1"] == 1
    many = len(visits), sum(visits)
    visits.clear()
    without_volatile(result, ("*.*.*.z1",))
    # 64 paths sharing their wildcards walk the result once, as one path does: the same nodes,
    # each with one tree node in hand (each path walked the result alone before: 2,300 such
    # paths took 126 s on a 1 MB result).
    assert many == (len(visits), sum(visits))


@pytest.mark.parametrize(
    "value, paths, expected",
    [
        ({"a": 1, "b": {"c": 2, "d": 3}}, ("b.c", "a"), {"b": {"d": 3}}),
        (
            {"items": [{"s": 1, "id": 1}, {"s": 2, "id": 2}]},
            ("items.*.s",),
            {"items": [{"id": 1}, {"id": 2}]},
        ),
        ({"l": [0, 1, 2, 3]}, ("l.1", "l.2"), {"l": [0, 3]}),  # indexes of the result as given
        ({"l": [0, 1, 2]}, ("l.01",), {"l": [0, 2]}),
        ({"a": {"x": 1, "y": 2}}, ("*.x", "a.y"), {"a": {}}),
        ({"a": {"b": 1}}, ("a", "a.b"), {}),
        ({"a": [1]}, ("a.²",), {"a": [1]}),  # a digit that is no ASCII digit indexes nothing
        ({"a": 1}, ("nope.x", ""), {"a": 1}),
    ],
)
def test_volatile_paths_remove_what_they_match(value, paths, expected):
    assert without_volatile(value, paths) == expected


# -- a fault stays with its event ------------------------------------------------------------------


@pytest.fixture
def faulty_tool(monkeypatch):
    """A bug in a rule, met only by calls of the tool `boom` (any future bug looks like this)."""
    real = ResearcherRules.refusal

    def refusal(self, state, event, tool, signature, exempt):
        if tool == "boom":
            raise KeyError("secret-content-in-the-message")
        return real(self, state, event, tool, signature, exempt)

    monkeypatch.setattr(ResearcherRules, "refusal", refusal)


def faulting_run() -> RunScript:
    s = RunScript("faulty", tools=[{"name": "search"}, {"name": "boom"}])
    s.round_of(("search", {"q": "one"}, "r1"))
    s.round_of(("boom", {"q": "two"}, "r2"))
    for _ in range(7):
        s.round_of(("search", {"q": "one"}, "r1"))  # a loop, unjudged once quarantined
    return s


def test_a_fault_dead_letters_its_event_and_quarantines_only_its_run(faulty_tool):
    commands, letters = replayed(interleaved(faulting_run(), *healthy_runs()))
    assert len(letters) == 1
    assert re.fullmatch(
        r"stallwatch failed applying this event \(KeyError at "
        r"test_hostile_input\.py:\d+\); its run is quarantined: no longer "
        r"judged, its calls are allowed",
        letters[0]["error"],
    )
    assert "secret" not in orjson.dumps(letters).decode()
    faulty = of_runs(commands, "faulty")
    assert faulty[0]["decision"] == "allow" and faulty[0]["reason"] == "Allowed."
    later = faulty[1:]
    assert len(later) == 7 and {c["decision"] for c in later} == {"allow"}
    assert all("no longer judges" in c["reason"] for c in later)
    assert not [c for c in commands if c["type"] == "stop" and c["run_id"] == "faulty"]
    assert of_runs(commands, "healthy") == replayed(interleaved(*healthy_runs()))[0]


def test_the_batch_step_keeps_the_fault_with_its_event_as_replay_does(faulty_tool):
    lines = interleaved(faulting_run(), *healthy_runs())
    expected, letters = replayed(lines)
    states: dict[str, RunState] = {}
    applier = BatchApplier(Detector(), "stallwatch.events")
    commands, dead = [], []
    for start in range(0, len(lines), 7):  # cut into batches, as a worker reads them
        batch = [
            SourceMessage(orjson.loads(line)["run_id"].encode(), line, 0, start + i)
            for i, line in enumerate(lines[start : start + 7])
        ]
        result = applier.apply(batch, states.get, PartitionClock(), 0.0)
        states.update(result.states)
        commands += [orjson.loads(encode_command(c)) for c in result.commands]
        dead += [(key, reason) for key, _, reason in result.letters]
    assert commands == expected
    assert dead == [(b"faulty", "engine_fault")] and len(letters) == 1
    stored = RunState.from_bytes(states["faulty"].to_bytes())
    assert stored.quarantined  # a successor restoring the run keeps it quarantined


def test_a_fault_in_run_started_quarantines_the_new_run(monkeypatch):
    monkeypatch.setattr(ResearcherRules, "start", lambda *_: 1 / 0)
    s = RunScript("faulty")
    s.round_of(("search", {"q": "one"}, "r1"))
    commands, letters = replayed(interleaved(s))
    assert len(letters) == 1 and "ZeroDivisionError" in letters[0]["error"]
    assert [c["decision"] for c in commands] == ["allow"]
    assert "no longer judges" in commands[0]["reason"]


def test_the_embedded_engine_answers_a_faulting_call_at_once(faulty_tool):
    engine = EmbeddedEngine()
    answers = [engine.handle(parse_event(orjson.dumps(e))) for e in faulting_run().events]
    verdicts = [c for out in answers for c in out if c.type == "verdict"]
    assert len(verdicts) == 9 and {v.decision for v in verdicts} == {"allow"}
    assert engine.runs["faulty"].quarantined


def test_a_quarantined_state_round_trips_and_others_keep_their_bytes():
    state = RunState(mode="researcher", started_ts=1.0)
    plain = state.to_bytes()
    assert RunState.from_bytes(plain).quarantined is False
    state.quarantined = True
    assert len(orjson.loads(state.to_bytes())) == len(orjson.loads(plain)) + 1
    assert RunState.from_bytes(state.to_bytes()).quarantined is True
