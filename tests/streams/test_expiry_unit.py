"""Which runs a worker forgets: abandoned ones after the idle timeout, ended ones sooner."""

from __future__ import annotations

from stallwatch.streams.app import ENDED_RETENTION_S, is_expired

from stallwatch.engine.state import RunState


def test_abandoned_runs_expire_after_the_idle_timeout_and_ended_ones_sooner():
    live = RunState(mode="researcher", started_ts=0.0, last_ts=1_000.0)
    assert not is_expired(live, 1_000.0 + 3_599, idle_timeout_s=3_600)
    assert is_expired(live, 1_000.0 + 3_601, idle_timeout_s=3_600)
    ended = RunState(mode="researcher", started_ts=0.0, last_ts=1_000.0)
    ended.release()
    assert not is_expired(ended, 1_000.0 + ENDED_RETENTION_S - 1, idle_timeout_s=3_600)
    assert is_expired(ended, 1_000.0 + ENDED_RETENTION_S + 1, idle_timeout_s=3_600)
