"""What a pipeline's partition tasks share of its place in the consumer group."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# The consumer group's session: a member silent this long is removed and its partitions move.
SESSION_TIMEOUT_MS = 6000


class Membership:
    """One pipeline's standing in its group, read and changed by its partition tasks."""

    def __init__(self, rejoin: Callable[[], None] = lambda: None) -> None:
        self._rejoin = rejoin
        self.rejoins = 0  # the group asked to rebalance, by a task whose producer was fenced
        # Held while batches are handed out and while partitions change hands; a rebalance first
        # waits for the batches in flight, so a partition is never given up half done.
        self.lock = asyncio.Lock()
        # Between a revocation and the assignment that follows: the partitions may be another
        # member's already (this one was too slow to rejoin), so no task starts a producer
        # outside the assignment.
        self.revoking = False
        # An error inside a rebalance callback, which aiokafka would only log: the consume loop
        # raises it, since a partition assigned but not restored would be held and never served.
        self.rebalance_failure: BaseException | None = None
        # The first batch that raised (or was cancelled): the consume loop raises it too.
        self.batch_failure: BaseException | None = None
        self.stopping = False  # set by a stop: a batch cancelled from then on is abandoned
        # Said a failure: the consume loop, parked waiting for records, goes round to raise it.
        self.on_failure: Callable[[], None] = lambda: None

    @property
    def failure(self) -> BaseException | None:
        return self.rebalance_failure or self.batch_failure

    def rebalance_failed(self, exc: BaseException) -> None:
        self.rebalance_failure = self.rebalance_failure or exc
        self.on_failure()

    def batch_failed(self, exc: BaseException) -> None:
        self.batch_failure = self.batch_failure or exc
        self.on_failure()

    def ask_the_group(self) -> None:
        """Rebalance now: the group says whose each partition is, and the assignment that follows
        rebuilds a dropped task that is still this member's (Kafka Streams enforces a rebalance
        after a `TaskMigratedException` alike). A member that cannot reach its group coordinator
        gets no assignment, so it cannot fence the partition's owner again and again. Not while
        the pipeline stops: it leaves the group instead."""
        if self.stopping:
            return
        self.rejoins += 1
        self._rejoin()
