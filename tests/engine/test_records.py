"""The engine's one path from records to runs, shared by replay and the worker's batch step."""

from __future__ import annotations

from stallwatch.engine.detector import Detector
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.records import SKIPPED, RecordApplier
from stallwatch.engine.state import RunState
from tests.script import RunScript


def _script() -> RunScript:
    s = RunScript("r1")
    s.start_round()
    s.call("search", {"q": 1})
    s.call("search", {"q": 1})
    return s


def test_states_not_in_hand_are_loaded_once_and_kept_in_hand():
    stored = RunState.from_bytes(_applied("r1").to_bytes())
    loads: list[str] = []

    def load(run_id: str) -> RunState | None:
        loads.append(run_id)
        return stored if run_id == "r1" else None

    states: dict[str, RunState] = {}
    lines = _script().lines()[2:]  # the two calls: the run is known only to the store
    out = list(RecordApplier(Detector()).apply(lines, states, lambda *_: None, load=load))
    assert loads == ["r1"]
    assert states["r1"] is stored
    assert [c.decision for commands in out for c in commands] == ["allow", "refuse"]


def test_records_at_or_below_a_runs_last_offset_are_skipped_and_the_rest_remembered():
    stored = _applied("r1")
    stored.last_offset = 1
    states: dict[str, RunState] = {}
    lines = _script().lines()
    out = list(
        RecordApplier(Detector()).apply(
            lines, states, lambda *_: None, load=lambda run_id: stored, offsets=[0, 1, 2, 3]
        )
    )
    assert out[:2] == [SKIPPED, SKIPPED]
    assert stored.last_offset == 3 and states["r1"] is stored


def test_bad_records_go_to_rejected_with_their_index_and_keys_must_name_the_run():
    lines = _script().lines()
    seen = []
    out = list(
        RecordApplier(Detector()).apply(
            [lines[0], b"{", lines[1]],
            {},
            lambda i, value, exc: seen.append((i, exc.reason)) or i,
            keys=[b"r1", b"r1", b"other"],
        )
    )
    assert seen == [(1, "malformed_json"), (2, "key_mismatch")]
    assert out == [[], 1, 2]


def _applied(run_id: str) -> RunState:
    engine = EmbeddedEngine()
    for _ in engine.replay(_script().lines()[:2]):
        pass
    return engine.runs[run_id]
