"""The policy defaults of every mode, in one table: the pydantic `Policy` and `RunState` read it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

MODES = ("researcher", "chat", "coder")

# field -> default per mode, in the order of MODES. Researcher and chat are contract v1's.
_TABLE: dict[str, tuple[Any, Any, Any]] = {
    #                        researcher chat  coder
    "no_progress_threshold": (5,        5,    5),
    "loop_detect_threshold": (3,        3,    3),
    # Coding agents take 30 to 150 steps on a healthy task; 40 would cut off solved runs.
    "max_rounds":            (40,       40,   200),
    "call_budget":           (None,     None, None),
    "overloaded_exempt_max": (3,        3,    3),
    "time_limit_s":          (None,     None, None),
    "nudge_at":              (3,        3,    3),
    "cycle_threshold":       (None,     None, None),
    # Coder mode: one nudge when a call returns the same result after 3 changes in a row.
    "stall_nudge_at":        (None,     None, 3),
    "stall_stop_at":         (None,     None, None),
    # Refuse calls to a tool the fleet reports failing in many runs (issue 13): off by default.
    "fleet_breaker":         (False,    False, False),
}


# Each mode's column, built once (read-only): a run's start only copies it.
_BY_MODE = {mode: MappingProxyType({name: values[column] for name, values in _TABLE.items()})
            for column, mode in enumerate(MODES)}
# Contract v1's defaults: what a `Policy` holds for a field nobody set.
V1_DEFAULTS = _BY_MODE["researcher"]


def policy_defaults(mode: str) -> Mapping[str, Any]:
    """Every policy field's default in `mode` (an unknown mode gets researcher's, v1's own)."""
    return _BY_MODE.get(mode, V1_DEFAULTS)
