"""How long a property test searches: a fixed budget in `pytest` (the pure lane, make test) and a
long one in `make fuzz` (HYPOTHESIS_PROFILE=fuzz)."""

from __future__ import annotations

import os

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"


def examples(lane: int, fuzz: int) -> int:
    """A test's number of examples: `lane` in the pure lane, `fuzz` under `make fuzz`."""
    return fuzz if FUZZ else lane
