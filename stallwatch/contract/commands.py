"""Commands the detector answers with (contract v1), and the dead-letter record."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

_LENIENT = ConfigDict(extra="ignore", frozen=True)

RefusalCode = Literal["duplicate_call", "repeated_call", "run_stopped", "budget_exhausted"]
StopCode = Literal[
    "no_new_facts", "all_refused", "tool_failures", "round_limit", "call_budget", "time_limit"
]
StopAction = Literal["answer_without_tools", "end_turn"]


class _Command(BaseModel):
    model_config = _LENIENT
    v: Literal[1] = 1
    command_id: str
    run_id: str
    caused_by: str


class Verdict(_Command):
    """The answer to one `call_proposed`: run it or not, and words for the model."""

    type: Literal["verdict"] = "verdict"
    call_id: str
    round: int
    decision: Literal["allow", "refuse"]
    code: RefusalCode | None
    reason: str


class Stop(_Command):
    """The end of a run's tool use; at most one per run."""

    type: Literal["stop"] = "stop"
    round: int
    code: StopCode
    action: StopAction
    reason: str
    detail: dict[str, Any]


Command = Annotated[Verdict | Stop, Field(discriminator="type")]
COMMAND_ADAPTER: TypeAdapter[Command] = TypeAdapter(Command)


class DeadLetter(BaseModel):
    """Input that could not be applied, with a specific error and the raw bytes as text."""

    model_config = _LENIENT
    error: str
    raw: str
    topic: str
    partition: int
    offset: int


def encode_command(command: Verdict | Stop) -> bytes:
    """The wire form of a command: one JSON object, fields in declaration order."""
    return orjson.dumps(command.__dict__)
