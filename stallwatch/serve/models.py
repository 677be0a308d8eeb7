"""Request and response bodies of the HTTP API; the OpenAPI document is generated from them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stallwatch.contract.events import Effect, Status, ToolSpec

_STRICT = ConfigDict(extra="forbid")


class StartRun(BaseModel):
    """Start a run (`run_started`). `policy` overrides the mode's defaults, as in the contract."""

    model_config = _STRICT
    run_id: str = Field(min_length=1)
    mode: str = "researcher"
    tools: list[ToolSpec] = []
    policy: dict[str, Any] | None = None
    parent_run_id: str | None = None
    tenant: str | None = None


class RunStarted(BaseModel):
    run_id: str
    # Text to append to the model's system prompt: which calls will be refused, and why.
    system_prompt: str


class ProposeCall(BaseModel):
    """Ask before running a call. `effect` (coder mode) overrides the tool's for this call."""

    model_config = _STRICT
    tool: str = Field(min_length=1)
    args: Any = None
    call_id: str | None = None
    effect: Effect | None = None


class StopView(BaseModel):
    """The run's stop: words for the model and what the runtime does next."""

    code: str
    action: str
    reason: str


class CallVerdict(BaseModel):
    call_id: str
    allowed: bool
    code: str | None
    # Words for the model when refused.
    reason: str
    # No verdict in time: allowed, failing open.
    timed_out: bool = False
    stop: StopView | None = None
    # Observe-only runs: the refusal this call would have had (it is allowed all the same).
    would_code: str | None = None
    would_reason: str | None = None


class ReportResult(BaseModel):
    """A call's result. Only its fingerprint leaves the server unless `send_content`."""

    model_config = _STRICT
    call_id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    status: Status = "ok"
    result: Any = None
    send_content: bool = False


class EndRun(BaseModel):
    model_config = _STRICT
    reason: str | None = None


class RunView(BaseModel):
    """A run as the server holds it: its round, its stop, the nudges not yet read."""

    run_id: str
    round: int
    stop: StopView | None = None
    # Words for the model before a stop, each returned once.
    nudges: list[str] = []
    # Observe-only runs: the stop the run would have had (it is never acted on).
    would_stop: StopView | None = None


class Problem(BaseModel):
    """An error: one line naming what to change."""

    error: str
