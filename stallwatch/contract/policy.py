"""The run policy, declared once: its fields, their bounds, contract v1's defaults and each mode's own."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

MODES = ("researcher", "chat", "coder")

PositiveInt = Annotated[int, Field(ge=1)]


class Policy(BaseModel):
    """Per-run overrides of the detection thresholds; `None` in an optional limit means no limit.
    A field's default is contract v1's; a run of another mode takes that mode's defaults
    (`for_mode`) for the fields it does not set. Both come from `stallwatch.contract.policy`."""

    # Strict like every event model (stallwatch.contract.events): a string is no number.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    no_progress_threshold: PositiveInt = 5
    loop_detect_threshold: Annotated[int, Field(ge=2)] = 3
    max_rounds: PositiveInt = 40
    call_budget: PositiveInt | None = None
    overloaded_exempt_max: Annotated[int, Field(ge=0)] = 3
    time_limit_s: Annotated[float, Field(gt=0)] | None = None
    # Researcher and coder modes: a `nudge` command when the already-seen streak reaches this;
    # null: never.
    nudge_at: PositiveInt | None = 3
    # Chat mode: refuse a call continuing a cycle of 2 to 4 calls (same arguments, same
    # results) repeated this many times in a row; null: off.
    cycle_threshold: Annotated[int, Field(ge=2)] | None = None
    # Coder mode: one `nudge` naming a call that returned the same result this many runs in a
    # row with changes in between (default 3 in coder mode); null: never.
    stall_nudge_at: Annotated[int, Field(ge=2)] | None = None
    # Coder mode: stop with `no_effect` at this many such runs; null (the default): never.
    stall_stop_at: Annotated[int, Field(ge=2)] | None = None
    # Addition to v1: refuse calls to a tool with an open `tool_failing` fleet
    # incident (verdict code `fleet_incident`) until the fleet reports it closed; off by default.
    fleet_breaker: bool = False
    # Addition to v1: decisions are computed, recorded and counted, but the run is never refused,
    # stopped or nudged: each refusal goes out as an allowing verdict carrying `would_code`, each
    # stop and nudge as a `would_stop` / `would_nudge` command. The administrator can set it for
    # a tenant or a whole deployment; a run cannot unset it then.
    observe_only: bool = False

    @classmethod
    def for_mode(cls, mode: str, overrides: dict[str, Any] | None = None) -> Policy:
        """The effective policy of a run: the mode's defaults, then the run's own overrides."""
        return cls.model_validate({**policy_defaults(mode), **(overrides or {})})


# Where a mode's defaults differ from contract v1's (researcher and chat take v1's as they are).
_MODE_DEFAULTS: dict[str, dict[str, Any]] = {
    # Coding agents take 30 to 150 steps on a healthy task; 40 would cut off solved runs.
    # One nudge when a call returns the same result after 3 changes in a row.
    "coder": {"max_rounds": 200, "stall_nudge_at": 3},
}

# The field names, in declaration order: the run state stores their values in this order.
POLICY_FIELDS: tuple[str, ...] = tuple(Policy.model_fields)
# Contract v1's defaults: what a `Policy` holds for a field nobody set.
V1_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {name: info.default for name, info in Policy.model_fields.items()}
)
# Each mode's defaults, built once (read-only): a run's start only copies them.
_BY_MODE = {mode: MappingProxyType({**V1_DEFAULTS, **_MODE_DEFAULTS.get(mode, {})}) for mode in MODES}


def policy_defaults(mode: str) -> Mapping[str, Any]:
    """Every policy field's default in `mode` (an unknown mode gets researcher's, v1's own)."""
    return _BY_MODE.get(mode, V1_DEFAULTS)
