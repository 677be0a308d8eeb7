"""Behaviour pinned on the stored public sample, and the rules' targets over all of it."""

# Coder mode. Skipped when the sample has not been collected (benchmarks/trajectories/README.md).

import pytest

from benchmarks.trajectories import mini_swe_agent, swe_agent
from benchmarks.trajectories.collect import DEFAULT_DATA
from benchmarks.trajectories.load import load_runs, read_json
from benchmarks.trajectories.replay import LOOP_STOP_WITHIN, replay
from stallwatch.engine.embedded import EmbeddedEngine

MINI = DEFAULT_DATA / "mini-swe-agent"
SWE_AGENT = DEFAULT_DATA / "swe-agent-2024"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (MINI.is_dir() and SWE_AGENT.is_dir()), reason="the trajectory sample is not collected"
    ),
]


def test_real_edit_loop_is_stopped_within_six_rounds():
    """SWE-agent with doubao-pro: the same `edit 1:37` rejected for a syntax error 25 times in a
    row from round 7 (unresolved); coder mode stops it at its 5th failure."""
    path = SWE_AGENT / "doubao-pro-128k" / "trajs" / "fasterxml__jackson-databind-3621.traj.gz"
    out = replay(swe_agent.convert(read_json(path), "jackson-databind-3621", False), "coder")
    [loop] = out.loops
    assert (loop.start_round, loop.length, loop.call.tool) == (7, 25, "edit")
    assert out.stop_code == "tool_failures" and out.stop_round < loop.start_round + LOOP_STOP_WITHIN
    assert out.steps_saved == len(out.traj.steps) - out.stop_round == 20


def test_resolved_run_with_edits_and_test_reruns_is_left_alone():
    """mini-swe-agent on matplotlib-25122 (resolved): 8 writes and 6 re-runs of scripts and
    tests. Researcher mode refuses re-runs whose output had changed; coder mode refuses nothing
    and never stops."""
    traj = mini_swe_agent.convert(
        read_json(MINI / "matplotlib__matplotlib-25122.traj.json.gz"), "matplotlib-25122", True
    )
    researcher = replay(traj, "researcher")
    assert sum(r.changed for r in researcher.refusals) == 10
    coder = replay(traj, "coder")
    assert coder.stop_code is None and coder.refusals == []


@pytest.fixture(scope="module")
def outcomes():
    engine = EmbeddedEngine()
    return [replay(traj, "coder", engine) for traj in load_runs(DEFAULT_DATA)]


@pytest.mark.xfail(
    strict=True,
    reason=(
        "a finding on the sample: swe-agent deepseek-chat-v2/googlecontainertools__jib-4035 (resolved) runs "
        "`javac` 20 times from round 6, `command not found` each time, after its fix (round 3); "
        "coder mode stops it with tool_failures at round 10, a true loop in a run SWE-bench resolved"
    ),
)
def test_no_resolved_run_is_stopped(outcomes):
    stopped = [
        (o.traj.run_id, o.stop_code, o.stop_round) for o in outcomes if o.traj.resolved and o.stop_code
    ]
    assert stopped == []


def test_stops_in_resolved_runs_cut_off_nothing_new(outcomes):
    """The weaker form that holds: where coder mode stops a resolved run, every later recorded
    call repeats one made before the stop, with the same result."""
    stopped = [o for o in outcomes if o.traj.resolved and o.stop_code]
    assert [o.new_after_stop for o in stopped] == [0] * len(stopped)


def test_refusals_withholding_changed_output_stay_under_one_percent(outcomes):
    refusals = [r for o in outcomes for r in o.refusals]
    changed = [r for r in refusals if r.changed]
    assert refusals and len(changed) <= 0.01 * len(refusals)


def test_every_loop_is_stopped_within_six_rounds(outcomes):
    """Among them doubao-pro-128k/fasterxml__jackson-databind-4048: `python replicate_bug.py`
    24 times in a row, printing nothing, with nothing else run between (stopped in round 10 by
    no_new_facts since a silent repeat counts as already seen)."""
    loops = [(o, loop) for o in outcomes for loop in o.loops]
    missed = [(o.traj.run_id, loop.start_round) for o, loop in loops if not o.stopped_in_time(loop)]
    assert len(loops) == 24 and missed == []
