"""Incidents from windows: open once, updated while the rule holds, closed after a quiet window."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stallwatch.contract.events import advisory_event_id
from stallwatch.contract.incidents import INCIDENT_KINDS, incident_id
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import Tally
from stallwatch_streams.fleet.window import State, Window, add, stopped_runs, window


@dataclass(slots=True)
class Outcome:
    """What one step decided: incident records to publish (latest state of each) and advisories."""

    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)
    advisories: list[dict[str, Any]] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    # The estimated bytes the key's buckets grew by (negative: shrank): fleet/sizes.py.
    grown: int = 0


def holds(kind: str, w: Window, cfg: FleetSettings) -> bool:
    """The three fleet rules, thresholds from the settings."""
    if kind == "tool_failing":
        # Every run counted made at least one call; one not reported yet is no failure. Else the
        # first failed result among runs still waiting on theirs opened it ("1 of 1 calls").
        calls = max(w.calls, len(w.runs))
        return len(w.runs) >= cfg.failing_runs and w.failures >= cfg.failing_ratio * calls
    if kind == "tool_same_answer":
        return w.answer_runs >= cfg.same_answer_runs and w.answer_args >= cfg.same_answer_args
    return len(w.stops) >= cfg.looping_stops


def evidence(kind: str, w: Window) -> dict[str, int]:
    if kind == "tool_failing":
        return {"calls": w.calls, "failures": w.failures, "runs": len(w.runs)}
    if kind == "tool_same_answer":
        return {"runs": len(w.runs), "answer_runs": w.answer_runs, "answer_args": w.answer_args}
    return {"runs": len(w.runs), "stops": len(w.stops)}


class IncidentRules:
    """The fleet's rules on one (tenant, tool) key's JSON-shaped state: partials folded into its
    windows, incidents opened, held and closed, and the advisories to the runs they concern."""

    def __init__(self, cfg: FleetSettings) -> None:
        self.cfg = cfg
        # Buckets per window: 5 for the default 300 s window and 60 s step.
        self.width = round(cfg.window_s / cfg.step_s)

    def apply(self, state: State, partial: Tally, clock: float) -> Outcome:
        """Fold a partial in, judge every window holding its bucket, then close what went quiet."""
        outcome = Outcome()
        index, outcome.grown = add(state, partial, self.cfg.step_s, self.width)
        if index is not None:
            for first in range(index - self.width + 1, index + 1):
                w = window(state, first, self.width, self.cfg.same_answer_args)
                for kind in INCIDENT_KINDS:
                    if holds(kind, w, self.cfg):
                        self._held(state, kind, w, outcome)
        self.close_quiet(state, max(clock, partial["ts"]), outcome)
        return outcome

    def _held(self, state: State, kind: str, w: Window, outcome: Outcome) -> None:
        step, width = self.cfg.step_s, self.width
        start, end = w.first * step, (w.first + width) * step
        incident = state["open"].get(kind)
        before = None if incident is None else (incident["held"], dict(incident["evidence"]))
        if incident is None:
            if end <= state["closed"].get(kind, float("-inf")):
                return  # late data for a window of an incident already closed: no reopening
            incident = state["open"][kind] = {
                "id": incident_id(state["tenant"], state["tool"], kind, start),
                "start": start,
                "opened_at": end,
                "held": end,
                "evidence": evidence(kind, w),
                "advised": [],
            }
            outcome.opened.append(kind)
        elif end > incident["held"]:
            incident["held"], incident["evidence"] = end, evidence(kind, w)
        elif end == incident["held"]:
            incident["evidence"] = evidence(kind, w)  # the same window, with more of its data
        else:
            return
        told = len(incident["advised"])
        self._advise(state, kind, incident, w.runs, outcome)
        # Published when something changed: an unchanged incident is not written again per tally.
        if before != (incident["held"], incident["evidence"]) or told != len(incident["advised"]):
            outcome.incidents[incident["id"]] = self.record(state, kind, incident, None)

    def _advise(
        self, state: State, kind: str, incident: dict[str, Any], runs: frozenset[str], outcome: Outcome
    ) -> None:
        """Tell the live runs of the window not told yet (bounded; runs seen stopped skipped)."""
        room = self.cfg.max_advised_runs - len(incident["advised"])
        if room <= 0:
            return
        told, stopped = set(incident["advised"]), stopped_runs(state)
        for run in sorted(runs - told - stopped)[:room]:
            incident["advised"].append(run)
            outcome.advisories.append(
                self.advisory(state, kind, incident, run, "open", incident["opened_at"])
            )

    def close_quiet(self, state: State, clock: float, outcome: Outcome) -> None:
        """Close the incidents whose rule has not held for a quiet window of event time."""
        for kind in [k for k, i in state["open"].items() if clock >= i["held"] + self.cfg.quiet]:
            self._close(state, kind, state["open"][kind]["held"] + self.cfg.quiet, outcome)

    def close_evicted(self, state: State, clock: float, outcome: Outcome) -> None:
        """Close every open incident of a key evicted for room (STALLWATCH_FLEET_MAX_KEYS), at
        the fleet clock and never before the end of the last window that held it: with its
        windows gone, no quiet window would ever close it, and a run under `fleet_breaker` would
        be refused the tool for good."""
        for kind in list(state["open"]):
            self._close(state, kind, max(clock, state["open"][kind]["held"]), outcome)

    def _close(self, state: State, kind: str, closed_at: float, outcome: Outcome) -> None:
        """The incident's closed record, and a closed advisory to each run told it opened."""
        incident = state["open"].pop(kind)
        state["closed"][kind] = incident["held"]
        stopped = stopped_runs(state)
        outcome.advisories.extend(
            self.advisory(state, kind, incident, run, "closed", closed_at)
            for run in incident["advised"]
            if run not in stopped
        )
        outcome.incidents[incident["id"]] = self.record(state, kind, incident, closed_at)
        outcome.closed.append(kind)

    def record(
        self, state: State, kind: str, incident: dict[str, Any], closed_at: float | None
    ) -> dict[str, Any]:
        """The incidents topic's value (stallwatch.contract.incidents.Incident)."""
        return {
            "v": 1,
            "incident_id": incident["id"],
            "state": "open" if closed_at is None else "closed",
            "kind": kind,
            "tenant": state["tenant"],
            "tool": state["tool"],
            "opened_window_start": incident["start"],
            "opened_at": incident["opened_at"],
            "last_held_at": incident["held"],
            "closed_at": closed_at,
            "window_s": self.cfg.window_s,
            "evidence": incident["evidence"],
            "advised_runs": len(incident["advised"]),
        }

    def advisory(
        self, state: State, kind: str, incident: dict[str, Any], run: str, phase: str, ts: float
    ) -> dict[str, Any]:
        """The fleet_advisory event for one run (docs/contract.md)."""
        return {
            "v": 1,
            "type": "fleet_advisory",
            "event_id": advisory_event_id(incident["id"], run, phase),
            "run_id": run,
            "ts": ts,
            "incident_id": incident["id"],
            "incident": phase,
            "kind": kind,
            "tool": state["tool"],
            "tenant": state["tenant"],
            "window_s": self.cfg.window_s,
            "evidence": incident["evidence"],
        }
