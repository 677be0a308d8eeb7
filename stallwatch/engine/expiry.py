"""When a run's state may be dropped: on the broker's clock (append time), never a producer's."""

from __future__ import annotations

from stallwatch.engine.state import RunState

# Events that are no activity of the run: a fleet advisory is the fleet's word about a run, and
# an advisory stream must not keep an abandoned run alive.
TIMELESS_EVENTS = frozenset({"fleet_advisory"})


def is_expired(state: RunState, now: float, idle_timeout_s: float, ended_retention_s: float) -> bool:
    """True when the run's last event is older than its limit on its partition's broker clock:
    an ended run's tombstone after `ended_retention_s`, any other run after `idle_timeout_s`.

    `now` is `PartitionClock.newest`. A run not yet placed on the clock (`seen_at` None: a state
    written by an older worker) is never expired: it is placed first (`PartitionClock.place`).
    The events' own `ts` plays no part: a producer's clock, however wrong, cannot expire a run
    that is live, its own or another's.
    """
    if state.seen_at is None:
        return False
    limit = ended_retention_s if state.ended else idle_timeout_s
    return now - state.seen_at > limit


class PartitionClock:
    """The broker's time on one partition: the newest append time of its records that were
    applied (`LogAppendTime`, stamped by the partition's leader), or, on a topic that keeps the
    producers' `CreateTime`, the worker's clock when it read them.

    Like the stream time of Kafka Streams it only moves forward and only with records: quiet
    spells in which nothing arrives are not counted (a later expiry, never an earlier one), and
    a partition read again after a rebuild expires the same runs."""

    def __init__(self) -> None:
        self.newest: float | None = None

    def advance(self, seen: float) -> None:
        """A record of the partition appended at `seen`, whatever it carried."""
        if self.newest is None or seen > self.newest:
            self.newest = seen

    def touch(self, state: RunState, kind: str, seen: float) -> None:
        """After an event of type `kind` was applied to `state`, appended at `seen`."""
        if kind not in TIMELESS_EVENTS:
            state.seen_at = seen
        self.advance(seen)

    def observe(self, state: RunState) -> None:
        """A state read back from the changelog: the clock is at least its last event."""
        if state.seen_at is not None and (self.newest is None or state.seen_at > self.newest):
            self.newest = state.seen_at

    def place(self, state: RunState) -> None:
        """A state with no broker time (an older worker's) counts as seen now: its idle time
        starts here, so it expires later than it would have, never earlier."""
        if state.seen_at is None:
            state.seen_at = self.newest
