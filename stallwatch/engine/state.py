"""A run's state: small, serialisable, holding digests and counters, never result content."""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field, fields
from itertools import islice
from operator import attrgetter
from typing import Any, NamedTuple

import orjson

from stallwatch.contract.policy import POLICY_FIELDS, V1_DEFAULTS

# The sets of digests are packed as one base64 string each, oldest first: 16 bytes of digest
# cost 22 characters in the changelog instead of ~40 as a JSON list of hex strings.
_DIGEST_SETS = ("signatures", "fingerprints")
# States are stored as a JSON array of field values, in declaration order, behind this format
# number: a third of the size of an object with field names, so the changelog is smaller and
# recovery faster. Bump it whenever a field is added, removed or reordered, or its meaning changes,
# and only as docs/operations.md ("Upgrading and rolling back") says: a release writes a format
# only once the release before it reads it, so that one release back is always a safe rollback.
# The newest format read; a state is written in format 5 unless its run is observe-only (6, which
# adds `observe_only` to the policy): the release before reads 5, and an observe-only run it
# cannot read it quarantines, whose calls it allows, as observe-only does.
STATE_FORMAT = 6
# The format before, whose policy had no `observe_only` (read as false): still what every run
# that is not observe-only is written in.
_NO_OBSERVE_ONLY_FORMAT = 5
# The format before, without the run's tenant (read as none: the run's tallies count it under
# no tenant), so that a worker upgraded in place keeps its runs.
_NO_TENANT_FORMAT = 4
# (a format 4 state is read as format 5, then as format 6)
# The format before, whose last field (a clock offset, now `seen_at`) is read as unknown, so that
# a worker upgraded in place keeps its runs (they count as seen at the first scan).
_CLOCK_OFFSET_FORMAT = 3
# Its shape: the policy's fields before `fleet_breaker`, and after `event_ids` only stop_code,
# ended, last_ts, last_offset and the clock offset. Read without these, a format 3 state
# failed (`zip() argument 2 is shorter`) and its run could not be restored.
_FORMAT_3_POLICY_FIELDS = 10
_FORMAT_3_FIELDS_AFTER_EVENT_IDS = 5
# Every format this version reads.
READABLE_FORMATS = frozenset({_CLOCK_OFFSET_FORMAT, _NO_TENANT_FORMAT, _NO_OBSERVE_ONLY_FORMAT, STATE_FORMAT})


class UnreadableState(ValueError):
    """A stored state in a format this version does not read (written by a later release, or by
    one too old): its run is rebuilt from its events, or quarantined, never dropped in silence."""

    def __init__(self, found: object) -> None:
        self.found = found
        known = ", ".join(str(f) for f in sorted(READABLE_FORMATS))
        super().__init__(f"run state in format {found!r}, this version reads formats {known}")


def stored_format(raw: bytes) -> int | None:
    """A stored state's format number, read from its first bytes without decoding the rest
    (None: not a state of any format)."""
    if not raw.startswith(b"["):
        return None
    end = raw.find(b",", 1, 12)
    digits = raw[1:end] if end > 0 else b""
    return int(digits) if digits.isdigit() else None


# What a run keeps is capped, so that a run of any length has a state far below the producer's
# limit (a 96,000-event run's state passed 1 MB and crash-looped the workers). Past a cap the
# oldest entries go (the oldest quarter of the digests, the oldest failing tool): an old call
# may then run once more, an old result count as new again, an old tool's failure streak start
# over: all on the "keep going" side. Worst case, every cap reached with the longest names:
# tests/engine/test_state.py. (Coder mode's own caps are in stallwatch/engine/rules/workspace.py.)
MAX_SIGNATURES = 2048  # calls allowed to run (researcher); a run of 40 rounds makes ~400
MAX_FINGERPRINTS = 4096  # results and fact digests seen; 40 rounds of 20 new items make ~800
MAX_FAILING_TOOLS = 32  # tools with a failure streak at once
MAX_CHAT_HISTORY = 40  # chat calls kept for cycles: 4-call cycles up to a threshold of 9
# Recent event ids (64-bit digests) to recognise a runtime's redelivery: a retry resends within
# seconds, so the last 512 events of a run are plenty. Kept after run_ended.
EVENT_WINDOW = 512
# Fleet incidents a run was told about (at most one nudge each) and, under `fleet_breaker`, the
# tools refused for an open one: a run sees a handful; the caps keep a flood of advisories from
# growing its state (past one, the oldest goes: an old incident may be told once more).
MAX_ADVISED = 32
MAX_FLEET_INCIDENTS = 32


class RunPolicy(NamedTuple):
    """A run's effective policy, one attribute per field of the contract's `Policy`, in its order
    and with its defaults (tests/engine/test_state.py holds them equal). A tuple, not the model
    itself: immutable like the model, and ten times cheaper to build from a stored state."""

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
    fleet_breaker: bool = V1_DEFAULTS["fleet_breaker"]
    observe_only: bool = V1_DEFAULTS["observe_only"]


# Contract v1's, for a state built without a policy (tests, tools): immutable, so shared.
V1_POLICY = RunPolicy()


# What each entry of a state's collections holds in memory, measured with tracemalloc on this
# engine (a digest in an ordered set, an event id, a coder call's history and open call, a chat
# call), and a new state's own: `RunState.approx_bytes` sums them in constant time.
_BYTES_BASE = 1_200
_BYTES_DIGEST = 86
_BYTES_EVENT_ID = 73
_BYTES_CALL_HISTORY = 275
_BYTES_OPEN_CALL = 340
_BYTES_CHAT_CALL = 270
_BYTES_NAME = 120  # a tool name in a list or a small dict


@dataclass(slots=True)
class RunState:
    mode: str
    started_ts: float
    # The run's effective policy: the mode's defaults, then the run's own overrides.
    policy: RunPolicy = V1_POLICY
    exempt_tools: list[str] = field(default_factory=list)
    approval_tools: list[str] = field(default_factory=list)
    # Tools that declare volatile fields, facts or patterns: name -> {"volatile": [...],
    # "facts": {...}}, plus "patterns": [...] when the tool lists its own volatile patterns.
    tool_specs: dict[str, dict[str, Any]] = field(default_factory=dict)
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
    chat_history: list[list[Any]] = field(default_factory=list)
    # coder: the tools' declared effects (tool -> "read" or "write"; others are "unknown"), and
    # the workspace version, advanced by every allowed call whose effect is not "read".
    tool_effects: dict[str, str] = field(default_factory=dict)
    workspace_version: int = 0
    # coder: calls allowed and not yet answered: call id -> [signature hex or None, effect,
    # workspace version when allowed, a short label naming the call for the model].
    open_calls: dict[str, list[Any]] = field(default_factory=dict)
    # coder: per call signature (hex), oldest first: [last outcome digest hex or None, runs in a
    # row with that outcome and changes between them, workspace version after its last run,
    # failures in a row with nothing else changing the workspace].
    call_history: dict[str, list[Any]] = field(default_factory=dict)
    # Ordered sets (dicts of None, oldest first), so that the oldest entries are evicted past a
    # cap and a state read back from bytes evicts exactly what the original would have.
    # researcher: calls allowed to run; coder: reads allowed at the current workspace version.
    signatures: dict[bytes, None] = field(default_factory=dict)
    # researcher and coder: results seen (coder: each under its call's signature).
    fingerprints: dict[bytes, None] = field(default_factory=dict)
    event_ids: dict[int, None] = field(default_factory=dict)  # recent events' 64-bit digests
    # Fleet advisories: incident ids the run was nudged about, oldest first; under
    # `fleet_breaker`, tool -> id of its open `tool_failing` incident.
    advised: list[str] = field(default_factory=list)
    fleet_incidents: dict[str, str] = field(default_factory=dict)
    stop_code: str | None = None
    ended: bool = False
    last_ts: float = 0.0
    last_offset: int = -1  # the highest source offset applied (stream workers only)
    # The broker's append time of the run's last event (stallwatch.engine.expiry), the only time
    # expiry reads; None in replay, where nothing expires.
    seen_at: float | None = None
    # run_started's tenant, bounded like an id: the fleet's tallies count per (tenant, tool).
    tenant: str | None = None
    # The engine failed on one of the run's events (stallwatch.engine.records): the run is no
    # longer judged, and its calls are allowed. Stored only when true, as one trailing value, so
    # that every other state keeps format 5's bytes.
    quarantined: bool = False

    def approx_bytes(self) -> int:
        """The state's bytes in memory, estimated in constant time from its collections' sizes
        (declarations excepted: the run's ledger charges them once, at its start)."""
        return (
            _BYTES_BASE
            + _BYTES_DIGEST * (len(self.signatures) + len(self.fingerprints))
            + _BYTES_EVENT_ID * len(self.event_ids)
            + _BYTES_CALL_HISTORY * len(self.call_history)
            + _BYTES_OPEN_CALL * len(self.open_calls)
            + _BYTES_CHAT_CALL * len(self.chat_history)
            + _BYTES_NAME
            * (len(self.failures) + len(self.advised) + len(self.fleet_incidents) + len(self.tool_effects))
        )

    def to_bytes(self) -> bytes:
        # Every field read in one call (a changelog record is written for each run a batch
        # touches), then the few stored in another form replaced in place.
        values: list[Any] = list(_ALL_FIELDS(self))
        policy = values[_FIELD_POLICY]
        observing = policy.observe_only
        for at in _FIELD_DIGEST_SETS:
            values[at] = base64.b64encode(b"".join(values[at])).decode()
        ids = values[_FIELD_EVENT_IDS]
        values[_FIELD_EVENT_IDS] = base64.b64encode(struct.pack(f">{len(ids)}Q", *ids)).decode()
        if values[_FIELD_LAST_SIGNATURE] is not None:
            values[_FIELD_LAST_SIGNATURE] = values[_FIELD_LAST_SIGNATURE].hex()
        if not self.quarantined:
            values.pop()
        # The policy's fields in line, as when each was a field of the state.
        values[_FIELD_POLICY : _FIELD_POLICY + 1] = policy if observing else policy[:-1]
        values.insert(0, STATE_FORMAT if observing else _NO_OBSERVE_ONLY_FORMAT)
        return orjson.dumps(values)

    @classmethod
    def from_bytes(cls, raw: bytes) -> RunState:
        values = orjson.loads(raw)
        found = values[0] if isinstance(values, list) and values else None
        if type(found) is not int or found not in READABLE_FORMATS:
            raise UnreadableState(found)
        if values[0] == _CLOCK_OFFSET_FORMAT:
            values = _from_clock_offset_format(values)
        if values[0] == _NO_TENANT_FORMAT:
            values = [_NO_OBSERVE_ONLY_FORMAT, *values[1:], None]
        if values[0] == _NO_OBSERVE_ONLY_FORMAT:
            before = _STORED_POLICY_AT + len(POLICY_FIELDS) - 1  # its policy's end: observe_only goes there
            values = [STATE_FORMAT, *values[1:before], False, *values[before:]]
        if len(values) == _STORED_WITHOUT_QUARANTINE:
            values.append(False)
        policy_end = _STORED_POLICY_AT + len(POLICY_FIELDS)
        data = dict(
            zip(
                _FIELD_NAMES,
                [
                    *values[1:_STORED_POLICY_AT],
                    RunPolicy(*values[_STORED_POLICY_AT:policy_end]),
                    *values[policy_end:],
                ],
                strict=True,
            )
        )
        for name in _DIGEST_SETS:
            packed = base64.b64decode(data[name])
            data[name] = dict.fromkeys(packed[i : i + 16] for i in range(0, len(packed), 16))
        packed = base64.b64decode(data["event_ids"])
        data["event_ids"] = dict.fromkeys(struct.unpack(f">{len(packed) // 8}Q", packed))
        if data["last_signature"] is not None:
            data["last_signature"] = bytes.fromhex(data["last_signature"])
        return cls(**data)

    @classmethod
    def tenant_and_ended(cls, raw: bytes) -> tuple[str | None, bool]:
        """A stored state's tenant and whether it has ended, without building the state."""
        values = orjson.loads(raw)
        if values[0] not in _WRITTEN_FORMATS:
            state = cls.from_bytes(raw)
            return state.tenant, state.ended
        at = _stored_at(values[0])
        return values[at["tenant"]], values[at["ended"]]

    @classmethod
    def summary(cls, raw: bytes) -> tuple[str | None, bool, int]:
        """A stored state's tenant, whether it has ended, and how many fingerprints it holds,
        without building the state (a restore reads this of every run)."""
        values = orjson.loads(raw)
        if values[0] not in _WRITTEN_FORMATS:
            state = cls.from_bytes(raw)
            return state.tenant, state.ended, len(state.fingerprints)
        at = _stored_at(values[0])
        packed = values[at["fingerprints"]]
        digest_bytes = len(packed) * 3 // 4 - packed.count("=", len(packed) - 2)
        return values[at["tenant"]], values[at["ended"]], digest_bytes // 16

    def seen_event(self, key: int) -> bool:
        """True for an event applied already (a redelivery); otherwise remembers it."""
        ids = self.event_ids
        if key in ids:
            return True
        ids[key] = None
        if len(ids) > EVENT_WINDOW:
            self.forget_old_events()
        return False

    def forget_old_events(self) -> None:
        """Past EVENT_WINDOW recent ids, the oldest quarter goes (as `_add` does)."""
        ids = self.event_ids
        for old in list(islice(ids, len(ids) - EVENT_WINDOW * 3 // 4)):
            del ids[old]

    def add_signature(self, signature: bytes) -> None:
        _add(self.signatures, signature, MAX_SIGNATURES)

    def add_fingerprint(self, digest: bytes) -> bool:
        """Remember a result's digest; True when it was not seen before (a new fact)."""
        if digest in self.fingerprints:
            return False
        _add(self.fingerprints, digest, MAX_FINGERPRINTS)
        return True

    def count_failure(self, tool: str) -> int:
        """One more failure in a row of `tool`; returns its streak."""
        failures = self.failures
        count = failures[tool] = failures.get(tool, 0) + 1
        if len(failures) > MAX_FAILING_TOOLS:
            del failures[next(iter(failures))]
        return count

    def advise(self, incident_id: str) -> bool:
        """True the first time the run hears of `incident_id`; remembers it."""
        if incident_id in self.advised:
            return False
        self.advised.append(incident_id)
        del self.advised[:-MAX_ADVISED]
        return True

    def open_fleet_incident(self, tool: str, incident_id: str) -> None:
        self.fleet_incidents[tool] = incident_id
        if len(self.fleet_incidents) > MAX_FLEET_INCIDENTS:
            del self.fleet_incidents[next(iter(self.fleet_incidents))]

    def release(self) -> None:
        """Drop everything but the tombstone facts once the run has ended. The recent event ids
        stay, so that an event redelivered after the end has no further effect either."""
        self.ended = True
        self.signatures = {}
        self.fingerprints = {}
        self.failures = {}
        self.exempt_tools = []
        self.approval_tools = []
        self.tool_specs = {}
        self.chat_history = []
        self.tool_effects = {}
        self.open_calls = {}
        self.call_history = {}
        self.advised = []
        self.fleet_incidents = {}


def _from_clock_offset_format(values: list[Any]) -> list[Any]:
    """A format 3 state's values in format 4's places: its policy had no `fleet_breaker`
    (off), it was told of no fleet incident, and its last field, a clock offset, gives way to an
    unknown broker time."""
    policy_end = _STORED_POLICY_AT + _FORMAT_3_POLICY_FIELDS
    after_ids = len(values) - _FORMAT_3_FIELDS_AFTER_EVENT_IDS
    return [
        _NO_TENANT_FORMAT,
        *values[1:policy_end],
        V1_DEFAULTS["fleet_breaker"],
        *values[policy_end:after_ids],
        [],
        {},
        *values[after_ids:-1],
        None,
    ]


def _add(ordered: dict[Any, None], key: object, cap: int) -> None:
    """Add to an ordered set; past `cap`, the oldest quarter goes at once. One by one, each
    eviction would scan the dict's deleted slots from its start (0.8 µs an event for a window
    of 512, measured); a quarter at a time costs a fraction of that per entry."""
    ordered[key] = None
    if len(ordered) > cap:
        for old in list(islice(ordered, len(ordered) - cap * 3 // 4)):
            del ordered[old]


_FIELD_NAMES = tuple(f.name for f in fields(RunState))
_ALL_FIELDS = attrgetter(*_FIELD_NAMES)
# Where a field stands among the fields `_ALL_FIELDS` reads (not in the stored list).
_FIELD_POLICY = _FIELD_NAMES.index("policy")
_FIELD_DIGEST_SETS = tuple(_FIELD_NAMES.index(name) for name in _DIGEST_SETS)
_FIELD_EVENT_IDS = _FIELD_NAMES.index("event_ids")
_FIELD_LAST_SIGNATURE = _FIELD_NAMES.index("last_signature")
# Where the policy's values start in a stored state (after the format number).
_STORED_POLICY_AT = 1 + _FIELD_NAMES.index("policy")
# Where a field after the policy stands in a stored state.
_STORED_AT = {
    name: 1 + i + len(POLICY_FIELDS) - 1
    for i, name in enumerate(_FIELD_NAMES)
    if i > _FIELD_NAMES.index("policy")
}
# A stored state's length without its optional trailing `quarantined`.
_STORED_WITHOUT_QUARANTINE = len(_FIELD_NAMES) + len(POLICY_FIELDS) - 1
# The formats this release writes (see STATE_FORMAT), read without building the state.
_WRITTEN_FORMATS = frozenset({_NO_OBSERVE_ONLY_FORMAT, STATE_FORMAT})
# Where a field after the policy stands in a stored state of format 5, one policy field shorter.
_STORED_AT_FORMAT_5 = {name: at - 1 for name, at in _STORED_AT.items()}


def _stored_at(found: int) -> dict[str, int]:
    return _STORED_AT if found == STATE_FORMAT else _STORED_AT_FORMAT_5
