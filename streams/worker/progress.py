"""The consume loop's signs of progress, read by the health checks and the watchdog."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Progress:
    """When the loop last went round, when each batch in flight began, and whether the worker
    can answer yet."""

    beat: float = 0.0
    restoring: bool = True
    batches_since: dict[int, float] = field(default_factory=dict)  # partition -> start of its batch

    def tick(self) -> None:
        self.beat = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the oldest sign of progress: a loop that goes round while one
        partition's batch hangs is stalled all the same."""
        oldest = min([self.beat, *self.batches_since.values()])
        return time.monotonic() - oldest
