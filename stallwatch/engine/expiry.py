"""When a run's state may be dropped: on event time only, never the wall clock, robust to skew."""

from __future__ import annotations

from stallwatch.engine.state import RunState


def is_expired(state: RunState, newest_event_ts: float, idle_timeout_s: float,
               ended_retention_s: float) -> bool:
    """True when the run's last event is older than its limit on its partition's clock: an ended
    run's tombstone after `ended_retention_s`, any other run after `idle_timeout_s`.

    `newest_event_ts` is `PartitionClock.newest`: the partition's newest event time, on which
    the run's own last event is placed through the clock offset it had when first seen, so a
    run whose clock is hours behind (or ahead of) the others is judged by its own idle time.
    """
    limit = ended_retention_s if state.ended else idle_timeout_s
    return newest_event_ts - (state.last_ts - (state.clock_offset or 0.0)) > limit


class PartitionClock:
    """The event time of one partition. Each run's events are read through the offset between
    its clock and the partition's when the partition first saw it, so no run's skew moves the
    clock: it advances as the runs' own clocks advance (with a 7-hour skew, every event of a
    run would otherwise be 7 hours old, or push every other run 7 hours towards expiry).
    Quiet spells in which no run sends anything are not counted: a later expiry, never an
    earlier one."""

    def __init__(self) -> None:
        self.newest: float | None = None

    def observe(self, state: RunState) -> None:
        """After an event was applied to `state` (or when a state is restored): place the run on
        the partition's clock the first time, then move the clock forward to its last event."""
        if state.clock_offset is None:
            state.clock_offset = 0.0 if self.newest is None else state.last_ts - self.newest
        placed = state.last_ts - state.clock_offset
        if self.newest is None or placed > self.newest:
            self.newest = placed
