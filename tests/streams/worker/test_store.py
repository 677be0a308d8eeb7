"""A partition's run states without a broker: decoded on first use, one object per run."""

from __future__ import annotations

from stallwatch.engine.state import RunState
from stallwatch_streams.worker.store import PartitionStates


def test_states_are_decoded_on_first_use_and_kept_one_object_per_run():
    stored = RunState(mode="chat", started_ts=1.0, last_offset=7, last_ts=50.0, seen_at=90.0)
    states = PartitionStates({"r1": stored.to_bytes()}, position=8)
    assert len(states) == 1 and states.position == 8
    loaded = states.load("r1")
    assert loaded is not None and loaded.last_offset == 7 and loaded.mode == "chat"
    assert states.load("r1") is loaded  # one object per run: the detector changes it in place
    assert states.clock.newest == 90.0  # a decoded state moves its partition's broker clock
    assert states.load("nobody") is None
    states.put("r2", RunState(mode="researcher", started_ts=2.0))
    assert sorted(run_id for run_id, _ in states.states()) == ["r1", "r2"]
    states.delete("r1")
    assert len(states) == 1
