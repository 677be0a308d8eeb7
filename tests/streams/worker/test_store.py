"""The run store without a broker: states by partition, decoded on first use, dropped with a partition."""

from __future__ import annotations

from stallwatch.engine.state import RunState
from streams.worker.store import RunStore


def test_states_are_decoded_on_first_use_and_forgotten_with_their_partition():
    store = RunStore()
    stored = RunState(mode="chat", started_ts=1.0, last_offset=7, last_ts=50.0, seen_at=90.0)
    store.adopt(0, {"r1": stored.to_bytes()})
    assert store.owns(0) and not store.owns(1)
    assert len(store) == 1
    loaded = store.load(0, "r1")
    assert loaded is not None and loaded.last_offset == 7 and loaded.mode == "chat"
    assert store.load(0, "r1") is loaded  # one object per run: the detector changes it in place
    assert store.clocks[0].newest == 90.0  # a decoded state moves its partition's broker clock
    assert store.load(0, "nobody") is None
    store.put(0, "r2", RunState(mode="researcher", started_ts=2.0))
    assert sorted(run_id for run_id, _ in store.states(0)) == ["r1", "r2"]
    store.delete(0, "r1")
    assert len(store) == 1
    store.drop(0)
    assert not store.owns(0) and len(store) == 0
