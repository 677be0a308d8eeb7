"""Which runs of a partition to expire: idle or ended too long on the partition's broker clock."""

from __future__ import annotations

import logging
import time

from stallwatch.engine.expiry import is_expired
from stallwatch_streams.worker.store import PartitionStates

log = logging.getLogger(__name__)


class ExpiryScan:
    """Collects one partition's garbage: scans its runs at most once an interval of the worker's
    own clock and tombstones the runs expired on the partition's broker clock. Which batch carries
    a tombstone depends on timing, but no answer does: the batch step already meets a run expired
    by the time of its record as absent (stallwatch_streams/worker/batch.py), with the same test on
    the same clock, so a scan only deletes what no event can see any more. A state with no broker time
    (written before states carried one) is not placed on the clock here, which would hide it from
    then on at a time of the worker's choosing: it gets its time from its run's next event.
    Counts the fingerprints held on the way."""

    def __init__(
        self, partition: int, idle_timeout_s: float, ended_retention_s: float, interval_s: float
    ) -> None:
        self.partition = partition
        self.idle_timeout_s = idle_timeout_s
        self.ended_retention_s = ended_retention_s
        self.interval_s = interval_s
        self._scanned_at: float | None = None  # the first batch starts the interval
        self.fingerprints = 0  # held by the partition's runs at its last scan

    def due(self, partition: PartitionStates) -> list[str]:
        """The runs to expire now: none unless the interval has passed."""
        now = time.monotonic()
        if self._scanned_at is None:
            self._scanned_at = now
        if now - self._scanned_at < self.interval_s:
            return []
        self._scanned_at = now
        states = list(partition.states())  # decoding them moves the clock to theirs
        newest = partition.clock.newest
        if newest is None:
            return []
        expired = [
            run_id
            for run_id, state in states
            if is_expired(state, newest, self.idle_timeout_s, self.ended_retention_s)
        ]
        # Counted from the states this scan decoded anyway.
        self.fingerprints = sum(len(state.fingerprints) for _, state in states)
        if expired:
            log.info("expiring %d idle or ended runs of partition %d", len(expired), self.partition)
        return expired
