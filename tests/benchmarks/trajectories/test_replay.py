"""Replaying authored trajectories through the engine: what each mode does to them."""

from benchmarks.trajectories import codeact, mini_swe_agent
from benchmarks.trajectories.replay import LOOP_STOP_WITHIN, find_loops, replay
from tests.benchmarks.trajectories.authored import (
    EDITOR_LOOP,
    EDITOR_LOOP_START,
    RESOLVED_EDIT_CYCLE,
    STALL,
)


def test_the_recorded_loop_is_found():
    [loop] = find_loops(codeact.convert_openhands(EDITOR_LOOP))
    assert (loop.start_round, loop.length) == (EDITOR_LOOP_START, 12)
    assert find_loops(mini_swe_agent.convert(RESOLVED_EDIT_CYCLE, "r", True)) == []


def test_researcher_refuses_reruns_whose_output_changed():
    """The baseline: a test re-run after an edit is refused as a duplicate although it
    would have shown progress."""
    out = replay(mini_swe_agent.convert(RESOLVED_EDIT_CYCLE, "r", True), "researcher")
    assert [(r.round, r.changed) for r in out.refusals] == [
        (6, True),
        (7, True),
        (9, True),
        (12, True),
        (13, False),
    ]
    assert out.stop_code is None


def test_researcher_catches_the_editor_loop_within_six_rounds():
    out = replay(codeact.convert_openhands(EDITOR_LOOP), "researcher")
    [loop] = out.loops
    assert out.stop_code == "all_refused"
    assert out.stopped_in_time(loop) and out.stop_round < EDITOR_LOOP_START + LOOP_STOP_WITHIN
    assert out.steps_saved == len(out.traj.steps) - out.stop_round > 0


def test_researcher_refuses_each_rerun_of_the_stalled_script():
    """The same script after each edit: an exact repeat to researcher mode, refused each time
    (its output did not change, so no refusal withheld progress)."""
    out = replay(mini_swe_agent.convert(STALL, "s", False), "researcher")
    assert all(r.code == "duplicate_call" for r in out.refusals)
    assert [(r.round, r.changed) for r in out.refusals] == [(5, False), (7, False), (9, False)]


def test_coder_leaves_the_resolved_edit_cycle_alone():
    """Re-runs after edits, a re-read of the edited file, the tests again, the diff again after
    them: every repeat follows a change (or a test run, which may write), so nothing is refused
    and nothing stops."""
    out = replay(mini_swe_agent.convert(RESOLVED_EDIT_CYCLE, "r", True), "coder")
    assert out.stop_code is None and out.refusals == [] and out.nudges == []


def test_coder_stops_the_editor_loop_within_six_rounds():
    out = replay(codeact.convert_openhands(EDITOR_LOOP), "coder")
    [loop] = out.loops
    assert out.stop_code == "tool_failures"
    assert out.stopped_in_time(loop) and out.stop_round < EDITOR_LOOP_START + LOOP_STOP_WITHIN
    assert out.steps_saved == len(out.traj.steps) - out.stop_round > 0
    assert out.new_after_stop == 1  # the same failing edit again, then only `finish` is new


def test_coder_nudges_once_on_the_stall_and_refuses_nothing():
    """Round 7 is the script's third identical output with an edit before each: one nudge."""
    out = replay(mini_swe_agent.convert(STALL, "s", False), "coder")
    assert out.refusals == [] and out.stop_code is None
    assert out.nudges == [(7, "stall:unknown")]
