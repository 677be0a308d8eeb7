"""The issue's targets on the stored public sample, in coder mode (skipped when the sample has
not been collected: see benchmarks/trajectories/README.md)."""

import pytest

from benchmarks.trajectories.collect import DEFAULT_DATA
from benchmarks.trajectories.load import load_runs
from benchmarks.trajectories.replay import replay
from stallwatch.engine.fleet import Fleet

pytestmark = pytest.mark.skipif(not (DEFAULT_DATA / "mini-swe-agent").is_dir(),
                                reason="the trajectory sample is not collected")


@pytest.fixture(scope="module")
def outcomes():
    fleet = Fleet()
    return [replay(traj, "coder", fleet) for traj in load_runs(DEFAULT_DATA)]


def test_no_resolved_run_is_stopped(outcomes):
    stopped = [(o.traj.run_id, o.stop_code, o.stop_round) for o in outcomes
               if o.traj.resolved and o.stop_code]
    assert stopped == []


def test_refusals_withholding_changed_output_stay_under_one_percent(outcomes):
    refusals = [r for o in outcomes for r in o.refusals]
    changed = [r for r in refusals if r.changed]
    assert len(changed) <= 0.01 * len(refusals)


def test_every_loop_is_stopped_within_six_rounds(outcomes):
    missed = [(o.traj.run_id, loop.start_round) for o in outcomes for loop in o.loops
              if not o.stopped_in_time(loop)]
    assert missed == []
