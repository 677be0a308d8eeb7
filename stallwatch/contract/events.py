"""Events a runtime sends (contract v1), as pydantic models discriminated by `type`."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from stallwatch.contract.limits import MAX_ID_CHARS
from stallwatch.contract.patterns import MAX_PATTERN_CHARS, MAX_PATTERNS, PatternError, compiled
from stallwatch.contract.policy import Policy

CONTRACT_VERSION = 1

# Strict about what the rules read (types, `v`, required fields); extra fields are ignored so
# that newer runtimes can add fields without older workers dead-lettering their events.
_STRICT = ConfigDict(extra="ignore", strict=True, frozen=True)

# Bounds on a tool's volatile fields: applying them to a result costs at most (the result's
# nodes the paths reach) x (the number of paths) (stallwatch.engine.canonical.PathTree).
MAX_VOLATILE_FIELDS = 64
MAX_PATH_CHARS = 256

Mode = Literal["researcher", "chat", "coder"]
# What a call does to the agent's workspace (coder mode); `unknown` is treated as a change.
Effect = Literal["read", "write", "unknown"]
Status = Literal["ok", "error", "overloaded"]
STATUSES: frozenset[str] = frozenset(get_args(Status))
# The statuses that count as the tool failing (failure streaks, the fleet's failing ratio).
FAILED_STATUSES: frozenset[str] = STATUSES - {"ok"}
Round = Annotated[int, Field(ge=0)]


class FactsSpec(BaseModel):
    """Where a tool's result lists its facts: the items of the list at `path`, identified by
    the value at `key` inside each item (or, without `key`, by the item's own fingerprint)."""

    model_config = _STRICT
    path: str
    key: str | None = None


class ToolSpec(BaseModel):
    """A tool the run may call, with the declarations that change how its calls are judged."""

    model_config = _STRICT
    name: str
    repeat_exempt: bool = False
    requires_approval: bool = False
    # Dotted paths into the result whose values change on every call (`took_ms`,
    # `items.*.score`; `*` matches any key or list index); removed before comparison.
    volatile_fields: Annotated[
        list[Annotated[str, Field(max_length=MAX_PATH_CHARS)]], Field(max_length=MAX_VOLATILE_FIELDS)
    ] = []
    facts: FactsSpec | None = None
    # Coder mode: what the tool's calls do to the workspace; null: the mode's default (unknown).
    effect: Effect | None = None
    # Regular expressions masked in the result's strings before comparison (durations, memory
    # addresses); null: the mode's default set (coder mode has one), [] for none.
    volatile_patterns: (
        Annotated[list[Annotated[str, Field(max_length=MAX_PATTERN_CHARS)]], Field(max_length=MAX_PATTERNS)]
        | None
    ) = None

    @field_validator("volatile_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str] | None) -> list[str] | None:
        # The engine's own compilation: what is validated is what runs.
        if value:
            try:
                compiled(tuple(value))
            except PatternError as exc:
                raise ValueError(str(exc)) from None
        return value


class _Event(BaseModel):
    model_config = _STRICT
    v: Literal[1]
    event_id: Annotated[str, Field(min_length=1)]
    run_id: Annotated[str, Field(min_length=1)]
    ts: float

    @field_validator("v", mode="before")
    @classmethod
    def _v_is_an_integer(cls, value: Any) -> Any:
        # Literal[1] alone would take `true`, since True == 1 in Python.
        if type(value) is not int:
            raise ValueError(f"`v` must be the integer {CONTRACT_VERSION}")
        return value


class RunStarted(_Event):
    type: Literal["run_started"]
    mode: Mode
    tools: list[ToolSpec] = []
    policy: Policy = Policy()
    parent_run_id: str | None = None
    tenant: str | None = None


class RoundStarted(_Event):
    type: Literal["round_started"]
    round: Round


class CallProposed(_Event):
    type: Literal["call_proposed"]
    round: Round
    call_id: str
    tool: str
    args: Any = None
    # Addition to v1: in place of `args`, so that arguments never leave the runtime: the call
    # signature's 32 hex digits as `stallwatch.engine.canonical.call_signature` computes them
    # (keyed with the shared secret). When both are sent, `args_digest` decides.
    args_digest: str | None = None
    # Coder mode: this call's effect, overriding its tool's (an editor's `view` command reads).
    effect: Effect | None = None


class CallResult(_Event):
    type: Literal["call_result"]
    round: Round
    call_id: str
    tool: str
    status: Status
    result: Any = None
    fingerprint: str | None = None
    empty: bool | None = None
    # With `fingerprint`, for a tool that declares `facts`: each item's identity, hashed by the
    # runtime with the same function (stallwatch.engine.canonical.fact_fingerprints).
    fact_fingerprints: list[str] | None = None

    @model_validator(mode="after")
    def _fingerprint_comes_with_empty(self) -> CallResult:
        if self.fingerprint is not None and self.empty is None:
            raise ValueError("`fingerprint` needs `empty` beside it (true when the result is empty)")
        return self

    @property
    def has_result(self) -> bool:
        return "result" in self.model_fields_set


class RoundEnded(_Event):
    type: Literal["round_ended"]
    round: Round


class RunEnded(_Event):
    type: Literal["run_ended"]
    reason: str | None = None


Count = Annotated[int, Field(ge=0)]
IncidentKind = Literal["tool_failing", "tool_same_answer", "tool_looping"]


class FleetEvidence(BaseModel):
    """What the fleet saw in the incident's window; every count optional (the words say only
    what is given)."""

    model_config = _STRICT
    calls: Count | None = None
    failures: Count | None = None
    runs: Count | None = None
    stops: Count | None = None
    answer_runs: Count | None = None
    answer_args: Count | None = None


class FleetAdvisory(_Event):
    """Addition to v1, written by the fleet app (stallwatch_streams.fleet): an incident across runs that
    concerns this run. `event_id` is derived from (incident, run, open/closed), so a repeated
    advisory is a redelivery. Changes no streak and never moves the run's time."""

    type: Literal["fleet_advisory"]
    incident_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    incident: Literal["open", "closed"]
    kind: IncidentKind
    tool: str
    tenant: Annotated[str, Field(max_length=MAX_ID_CHARS)] | None = None
    window_s: Annotated[float, Field(gt=0)]
    evidence: FleetEvidence = FleetEvidence()


def advisory_event_id(incident_id: str, run_id: str, incident: str) -> str:
    """A fleet advisory's event id: the same incident, run and open/closed always give the same
    id, so a repeated advisory (a restarted or duplicated fleet app) is a redelivery."""
    data = f"{incident_id}\x00{run_id}\x00{incident}".encode()
    return "fa-" + hashlib.blake2b(data, digest_size=16).hexdigest()


# An event as the engine applies it: the JSON object `stallwatch.contract.parse` validated (and
# bounded), kept as a dict because the engine reads a few fields of each and a model per event
# would cost the replay hot path. `Event` is the same event parsed into its model.
RawEvent = dict[str, Any]
Event = Annotated[
    RunStarted | RoundStarted | CallProposed | CallResult | RoundEnded | RunEnded | FleetAdvisory,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_TYPES = (
    "run_started",
    "round_started",
    "call_proposed",
    "call_result",
    "round_ended",
    "run_ended",
    "fleet_advisory",
)
