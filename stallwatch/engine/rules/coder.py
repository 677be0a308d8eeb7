"""Coder mode: reads repeated at one workspace version, one call failing, a change with no effect."""

from __future__ import annotations

from typing import Any

from stallwatch.contract.commands import Command, RefusalCode
from stallwatch.contract.events import RawEvent
from stallwatch.engine import words
from stallwatch.engine.digests import coder_digests
from stallwatch.engine.masks import effective_patterns
from stallwatch.engine.rules import workspace
from stallwatch.engine.rules.base import Rules, count_new_fact, nudge
from stallwatch.engine.state import RunState


class CoderRules(Rules):
    """Researcher's round rules over a workspace that changes: the bookkeeping is
    `stallwatch.engine.rules.workspace`'s; this turns its answers into verdicts, nudges and stops."""

    def start(self, state: RunState, tools: list[dict[str, Any]]) -> None:
        state.tool_effects = {t["name"]: t["effect"] for t in tools if t.get("effect") in ("read", "write")}

    def refusal(
        self, state: RunState, event: RawEvent, tool: str, signature: bytes | None, exempt: bool
    ) -> tuple[RefusalCode, str] | None:
        if self.duplicate_read(state, event, signature, exempt):
            return "duplicate_call", words.duplicate_read(tool)
        return None

    def allow(self, state: RunState, event: RawEvent, signature: bytes | None) -> None:
        workspace.allow(state, event, signature, workspace.effect_of(state, event))

    def annotate_stop(self, state: RunState, detail: dict[str, Any]) -> None:
        detail["workspace_version"] = state.workspace_version  # for explain, top and metrics

    def duplicate_read(self, state: RunState, event: RawEvent, signature: bytes | None, exempt: bool) -> bool:
        """A read already run, with the same arguments, at this workspace version."""
        return workspace.is_duplicate(state, signature, workspace.effect_of(state, event), exempt)

    def on_result(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """New facts per call signature, failures of one call while nothing else changes, and
        stalls: one call's same result after changes made between its runs."""
        tool = event["tool"]
        current = event["round"] == state.round and state.round_open
        if current:
            state.round_results += 1
        spec = state.tool_specs.get(tool)
        patterns = effective_patterns("coder", spec.get("patterns") if spec else None)
        whole, facts, itemised, empty = coder_digests(event, spec, patterns, self.secret)
        always_new = self.requires_approval(state, tool) or self.repeat_exempt(state, tool)
        judged = workspace.on_result(state, event, whole, facts, itemised, always_new, empty)
        if judged is None or judged.new_fact:
            count_new_fact(state, current)
        if judged is None:
            return
        if judged.failures >= state.policy.no_progress_threshold:
            self.call_failures(state, event, judged, out)
        elif judged.stall_runs:
            self.no_effect(state, event, judged, out)

    def call_failures(
        self, state: RunState, event: RawEvent, judged: workspace.Judged, out: list[Command]
    ) -> None:
        """One call failing again and again while nothing else changes the workspace."""
        self.stop(
            state,
            event,
            "tool_failures",
            {
                "tool": event["tool"],
                "consecutive_failures": judged.failures,
                "threshold": state.policy.no_progress_threshold,
                "call": judged.label,
            },
            out,
        )

    def no_effect(
        self, state: RunState, event: RawEvent, judged: workspace.Judged, out: list[Command]
    ) -> None:
        """A stall: the same result of one call, run after run, although the workspace changed
        between: a nudge at `stall_nudge_at`, a stop at `stall_stop_at`."""
        policy, tool = state.policy, event["tool"]
        if policy.stall_stop_at is not None and judged.stall_runs >= policy.stall_stop_at:
            self.stop(
                state,
                event,
                "no_effect",
                {
                    "call": judged.label,
                    "tool": tool,
                    "same_result_runs": judged.stall_runs,
                    "stall_stop_at": policy.stall_stop_at,
                },
                out,
            )
        elif judged.stall_runs == policy.stall_nudge_at:
            nudge(
                out,
                event,
                event["round"],
                words.stall(judged.label, judged.stall_runs),
                {
                    "call": judged.label,
                    "tool": tool,
                    "same_result_runs": judged.stall_runs,
                    "stall_nudge_at": policy.stall_nudge_at,
                    "workspace_version": state.workspace_version,
                },
            )
