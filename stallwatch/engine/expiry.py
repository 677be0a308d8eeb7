"""When a run's state may be dropped: by event time only, never by the worker's wall clock."""

from __future__ import annotations

from stallwatch.engine.state import RunState


def is_expired(state: RunState, newest_event_ts: float, idle_timeout_s: float,
               ended_retention_s: float) -> bool:
    """An ended run after `ended_retention_s`, any other after `idle_timeout_s`, both measured from
    the run's own last event to the newest event time of its partition. A run whose runtime's
    clock lags the others' is judged against the same partition clock while it keeps sending, so
    skew alone never expires an active run."""
    limit = ended_retention_s if state.ended else idle_timeout_s
    return newest_event_ts - state.last_ts > limit
