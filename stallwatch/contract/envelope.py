"""The one builder of an event's envelope (v, type, event_id, run_id, ts) around its fields."""

from __future__ import annotations

import time
import uuid
from typing import Any

from stallwatch.contract.events import CONTRACT_VERSION


def envelope(
    kind: str, run_id: str, event_id: str | None = None, ts: float | None = None, **fields: Any
) -> dict[str, Any]:
    """An event of type `kind` as a dict ready to encode; a fresh id and the current time when
    none are given (a log or a test passes its own, so replays are reproducible)."""
    return {
        "v": CONTRACT_VERSION,
        "type": kind,
        "event_id": uuid.uuid4().hex if event_id is None else event_id,
        "run_id": run_id,
        "ts": time.time() if ts is None else ts,
        **fields,
    }
