"""The consume loop's signs of progress, read by the health checks and the watchdog."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol


def _none() -> list[float]:
    return []


@dataclass
class Progress:
    """When the loop last went round, when each batch in flight began, and whether the worker
    can answer yet."""

    beat: float = 0.0
    restoring: bool = True
    # Whether its first assignment is done: its partitions (perhaps none) restored once.
    served: bool = False
    # When (monotonic) each partition's batch in flight began: its tasks', read from the health
    # checks' and the watchdog's threads.
    batches_since: Callable[[], Iterable[float]] = field(default=_none)
    clock: Callable[[], float] = time.monotonic  # what `beat` and the batches' begin times are read on
    # While the loop is parked waiting for records (the group model's tenant view), when what it
    # waits on last went round (its group consumer's thread): a loop parked on a live consumer is
    # not stalled, and need not wake to say so.
    waiting: Callable[[], float] | None = None

    def tick(self) -> None:
        self.beat = self.clock()

    @property
    def ready(self) -> bool:
        return not self.restoring

    def stalled_for(self) -> float:
        """Seconds since the oldest sign of progress: a loop that goes round while one
        partition's batch hangs is stalled all the same."""
        waiting = self.waiting
        beat = self.beat if waiting is None else max(self.beat, waiting())
        oldest = min([beat, *self.batches_since()])
        return self.clock() - oldest


class Signs(Protocol):
    """What the health checks and the watchdog read: one pipeline's progress, or all of them."""

    @property
    def ready(self) -> bool: ...

    def stalled_for(self) -> float: ...


class AllProgress:
    """The progress of every pipeline of a worker as one: as stalled as the most stalled (a
    stalled tenant's partitions must move to a live worker too), and ready once the tenants found
    at the start are all served, for good.

    Ready for good: a rebalance of one tenant's group (a worker joins or leaves, a tenant is
    added) moves some partitions while the others are served, and a worker that turned unready at
    each one would stall every rolling update of a fleet with many tenants. A worker that stops
    serving is not live, which the liveness check and the watchdog see."""

    def __init__(self, parts: Callable[[], Iterable[Progress]]) -> None:
        self._parts = parts
        self.started = False  # the tenants found at the start have their pipelines
        self._ready = False

    @property
    def ready(self) -> bool:
        if not self._ready and self.started:
            self._ready = all(part.served for part in self._parts())
        return self._ready

    def waiting(self) -> int:
        """Pipelines whose first assignment is not done yet."""
        return sum(not part.served for part in self._parts())

    @property
    def restoring(self) -> bool:
        return any(part.restoring for part in self._parts())

    def stalled_for(self) -> float:
        return max((part.stalled_for() for part in self._parts()), default=0.0)
