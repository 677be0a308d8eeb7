"""A run's state: small, serialisable, holding digests and counters, never result content."""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from stallwatch.contract.policy import V1_DEFAULTS

# The sets of digests are packed as one base64 string each: 16 bytes of digest cost 22
# characters in the changelog instead of ~40 as a JSON list of hex strings.
_DIGEST_SETS = ("signatures", "fingerprints")
# States are stored as a JSON array of field values, in declaration order, behind this format
# number: a third of the size of an object with field names, so the changelog is smaller and
# recovery faster. Bump it whenever a field is added, removed or reordered.
STATE_FORMAT = 2


@dataclass(slots=True)
class RunState:
    mode: str
    started_ts: float
    # The run's effective policy (the detector fills every field from the mode's defaults).
    no_progress_threshold: int = V1_DEFAULTS["no_progress_threshold"]
    loop_detect_threshold: int = V1_DEFAULTS["loop_detect_threshold"]
    max_rounds: int = V1_DEFAULTS["max_rounds"]
    call_budget: int | None = V1_DEFAULTS["call_budget"]
    overloaded_exempt_max: int = V1_DEFAULTS["overloaded_exempt_max"]
    time_limit_s: float | None = V1_DEFAULTS["time_limit_s"]
    nudge_at: int | None = V1_DEFAULTS["nudge_at"]
    cycle_threshold: int | None = V1_DEFAULTS["cycle_threshold"]
    stall_nudge_at: int | None = V1_DEFAULTS["stall_nudge_at"]
    stall_stop_at: int | None = V1_DEFAULTS["stall_stop_at"]
    exempt_tools: list[str] = field(default_factory=list)
    approval_tools: list[str] = field(default_factory=list)
    # Tools that declare volatile fields, facts or patterns: name -> {"volatile": [...],
    # "facts": {...}}, plus "patterns": [...] when the tool lists its own volatile patterns.
    tool_specs: dict[str, dict] = field(default_factory=dict)
    # The open round.
    round: int = 0
    round_open: bool = False
    round_proposed: int = 0
    round_allowed: int = 0
    round_results: int = 0
    round_new_fact: bool = False
    round_exempt_overloaded: bool = False
    # Streaks and counts over the run.
    already_seen_streak: int = 0
    nudged: bool = False  # a nudge went out during the current already-seen streak
    all_refused_streak: int = 0
    executed_calls: int = 0
    overloaded_exempted: int = 0
    extra_rounds: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # tool -> consecutive failures
    last_signature: bytes | None = None  # chat: the call just before
    repeat_count: int = 0  # chat: how many in a row with last_signature
    # chat, with cycle_threshold: recent calls as [signature hex, result digest hex or None,
    # call id, tool], bounded to the longest cycle times the threshold.
    chat_history: list[list] = field(default_factory=list)
    # coder: the tools' declared effects (tool -> "read" or "write"; others are "unknown"), and
    # the workspace version, advanced by every allowed call whose effect is not "read".
    tool_effects: dict[str, str] = field(default_factory=dict)
    workspace_version: int = 0
    # coder: calls allowed and not yet answered: call id -> [signature hex or None, effect,
    # workspace version when allowed, a short label naming the call for the model].
    open_calls: dict[str, list] = field(default_factory=dict)
    # coder: per call signature (hex), oldest first: [last outcome digest hex or None, runs in a
    # row with that outcome and changes between them, workspace version after its last run,
    # failures in a row with nothing else changing the workspace].
    call_history: dict[str, list] = field(default_factory=dict)
    # researcher: calls allowed to run; coder: reads allowed at the current workspace version.
    signatures: set[bytes] = field(default_factory=set)
    # researcher and coder: results seen (coder: each under its call's signature).
    fingerprints: set[bytes] = field(default_factory=set)
    event_ids: set[int] = field(default_factory=set)  # 64-bit digests, to ignore redeliveries
    stop_code: str | None = None
    ended: bool = False
    last_ts: float = 0.0
    last_offset: int = -1  # the highest source offset applied (stream workers only)

    def to_bytes(self) -> bytes:
        values: list[Any] = [STATE_FORMAT]
        for name in _FIELD_NAMES:
            value = getattr(self, name)
            if name in _DIGEST_SETS:
                value = base64.b64encode(b"".join(sorted(value))).decode()
            elif name == "event_ids":
                value = base64.b64encode(struct.pack(f">{len(value)}Q", *value)).decode()
            elif name == "last_signature" and value is not None:
                value = value.hex()
            values.append(value)
        return orjson.dumps(values)

    @classmethod
    def from_bytes(cls, raw: bytes) -> RunState:
        values = orjson.loads(raw)
        if values[0] != STATE_FORMAT:
            raise ValueError(f"run state in format {values[0]}, this worker reads {STATE_FORMAT}")
        data = dict(zip(_FIELD_NAMES, values[1:], strict=True))
        for name in _DIGEST_SETS:
            packed = base64.b64decode(data[name])
            data[name] = {packed[i:i + 16] for i in range(0, len(packed), 16)}
        packed = base64.b64decode(data["event_ids"])
        data["event_ids"] = set(struct.unpack(f">{len(packed) // 8}Q", packed))
        if data["last_signature"] is not None:
            data["last_signature"] = bytes.fromhex(data["last_signature"])
        return cls(**data)

    def release(self) -> None:
        """Drop everything but the tombstone facts once the run has ended."""
        self.ended = True
        self.signatures = set()
        self.fingerprints = set()
        self.event_ids = set()
        self.failures = {}
        self.exempt_tools = []
        self.approval_tools = []
        self.tool_specs = {}
        self.chat_history = []
        self.tool_effects = {}
        self.open_calls = {}
        self.call_history = {}


_FIELD_NAMES = tuple(f.name for f in fields(RunState))
