"""One recorded agent run in a framework-neutral shape, and its contract v1 events."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from stallwatch.contract.envelope import envelope as contract_envelope

Effect = Literal["read", "write", "unknown"]
Status = Literal["ok", "error"]

# One second between events: event time only matters for time limits, which the replay leaves off.
_TICK = 1.0
# An agent's own step limit when its trajectory does not say (mini-swe-agent's default is 250):
# stallwatch's round limit is not a loop detector, so the replay lifts it to the agent's own.
DEFAULT_STEP_LIMIT = 250


@dataclass(slots=True)
class Call:
    """One command the model asked for, and what the recorded run saw when it ran."""

    tool: str
    args: dict[str, Any]
    status: Status
    output: str
    effect: Effect = "unknown"


@dataclass(slots=True)
class Trajectory:
    """A run as recorded: one entry per model step (a step may hold no call: a format error)."""

    framework: str
    run_id: str
    resolved: bool
    tools: list[dict[str, Any]]
    steps: list[list[Call]] = field(default_factory=list)
    step_limit: int = DEFAULT_STEP_LIMIT

    @property
    def calls(self) -> Iterator[tuple[int, Call]]:
        """(round, call) for every call, rounds numbered from 1."""
        for number, step in enumerate(self.steps, 1):
            for call in step:
                yield number, call


def envelope(run_id: str, seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    """A contract v1 event of this run; `seq` makes event ids unique and orders event time."""
    return contract_envelope(kind, run_id, f"{run_id}:{seq}", 1_700_000_000.0 + seq * _TICK, **fields)


def run_started(traj: Trajectory, mode: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's first event. Coder mode declares each tool's effect; other modes drop it.
    `policy` overrides the mode's defaults (the round limit is the agent's own step limit)."""
    # Effects are coder mode's declarations; other modes get the tool names alone.
    tools = traj.tools if mode == "coder" else [{"name": t["name"]} for t in traj.tools]
    return envelope(
        traj.run_id,
        0,
        "run_started",
        mode=mode,
        tools=tools,
        policy={"max_rounds": max(traj.step_limit, len(traj.steps) + 1), **(policy or {})},
    )


def call_proposed(run_id: str, seq: int, number: int, call_id: str, call: Call, mode: str) -> dict[str, Any]:
    """A call as proposed; in coder mode it carries the effect the converter read from it."""
    extra = {"effect": call.effect} if mode == "coder" else {}
    return envelope(
        run_id, seq, "call_proposed", round=number, call_id=call_id, tool=call.tool, args=call.args, **extra
    )


def call_result(run_id: str, seq: int, number: int, call_id: str, call: Call) -> dict[str, Any]:
    """The recorded observation; its content goes in the event since this replay is local."""
    return envelope(
        run_id,
        seq,
        "call_result",
        round=number,
        call_id=call_id,
        tool=call.tool,
        status=call.status,
        result=call.output,
    )
