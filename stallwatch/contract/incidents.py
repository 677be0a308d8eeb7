"""Fleet incidents: the records of the `{prefix}.incidents` topic, and their ids."""

from __future__ import annotations

from hashlib import blake2b
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stallwatch.contract.events import FleetEvidence, IncidentKind

INCIDENT_KINDS: tuple[IncidentKind, ...] = ("tool_failing", "tool_same_answer", "tool_looping")


class Incident(BaseModel):
    """One incident's latest state; the topic is compacted on `incident_id` (the record key)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    v: Literal[1] = 1
    incident_id: str
    state: Literal["open", "closed"]
    kind: IncidentKind
    tenant: str | None
    tool: str
    # Event time (seconds since the epoch): the opening window, the end of the last window in
    # which the rule held, and the close (null while open).
    opened_window_start: float
    opened_at: float
    last_held_at: float
    closed_at: float | None = None
    window_s: float
    evidence: FleetEvidence
    # Runs sent a fleet_advisory (bounded: the cap is in streams/stallwatch_streams/fleet).
    advised_runs: int = Field(ge=0)


def incident_id(tenant: str | None, tool: str, kind: str, window_start: float) -> str:
    """ "inc-" + 16-byte BLAKE2b of what opened it: a restarted or duplicated fleet app derives the
    same id for the same incident (docs/contract.md)."""
    text = f"{tenant or ''}\x00{tool}\x00{kind}\x00{int(window_start)}"
    return "inc-" + blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
