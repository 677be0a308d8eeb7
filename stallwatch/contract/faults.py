"""How stallwatch names a fault of its own: in a dead letter, a log line, a warning."""

from __future__ import annotations

import traceback
from pathlib import Path


def fault(exc: BaseException) -> str:
    """The error's type and the line that raised it ("KeyError at detector.py:88"). Never its
    message: messages quote input (an invalid event, a call's arguments), and those may hold
    secrets."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    return f"{type(exc).__name__} at {Path(frames[-1].filename).name}:{frames[-1].lineno}"
