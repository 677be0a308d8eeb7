"""Which runs of a partition to expire: idle or ended too long on the partition's broker clock."""

from __future__ import annotations

import logging
import time

from stallwatch.engine.expiry import is_expired
from stallwatch.metrics import StallwatchMetrics
from streams.worker.store import RunStore

log = logging.getLogger(__name__)


class ExpiryScan:
    """Collects garbage: scans a partition's runs at most once an interval of the worker's own
    clock and tombstones the runs expired on the partition's broker clock. Which batch carries a
    tombstone depends on timing, but no answer does: the batch step already meets a run expired
    by the time of its record as absent (streams/worker/batch.py), with the same test on the
    same clock, so a scan only deletes what no event can see any more. A state with no broker
    time (written before issue 17) is not placed on the clock here, which would hide it from
    then on at a time of the worker's choosing: it gets its time from its run's next event.
    Counts the fingerprints held on the way."""

    def __init__(self, store: RunStore, metrics: StallwatchMetrics, idle_timeout_s: float,
                 ended_retention_s: float, interval_s: float) -> None:
        self.store = store
        self.metrics = metrics
        self.idle_timeout_s = idle_timeout_s
        self.ended_retention_s = ended_retention_s
        self.interval_s = interval_s
        self._scanned_at: dict[int, float] = {}
        self._fingerprints: dict[int, int] = {}  # partition -> fingerprints held at its last scan
        self.fingerprints = 0  # their sum, for the metrics' thread

    def due(self, partition: int) -> list[str]:
        """The runs to expire now: none unless the partition's interval has passed."""
        now = time.monotonic()
        if now - self._scanned_at.setdefault(partition, now) < self.interval_s:
            return []
        self._scanned_at[partition] = now
        states = list(self.store.states(partition))  # decoding them moves the clock to theirs
        clock = self.store.clocks[partition]
        newest = clock.newest
        if newest is None:
            return []
        expired = [run_id for run_id, state in states
                   if is_expired(state, newest, self.idle_timeout_s, self.ended_retention_s)]
        # Counted from the states this scan decoded anyway, one partition at a time.
        self._fingerprints[partition] = sum(len(state.fingerprints) for _, state in states)
        self.fingerprints = sum(self._fingerprints.values())
        if expired:
            log.info("expiring %d idle or ended runs of partition %d", len(expired), partition)
        return expired

    def forget(self, partition: int) -> None:
        """A partition this worker no longer owns."""
        self._scanned_at.pop(partition, None)
        self._fingerprints.pop(partition, None)
        self.fingerprints = sum(self._fingerprints.values())
