"""Researcher mode (contract v1): a call already allowed is refused; rounds must bring new facts."""

from __future__ import annotations

from stallwatch.contract.commands import Command, RefusalCode
from stallwatch.contract.events import RawEvent
from stallwatch.engine import words
from stallwatch.engine.digests import result_digests
from stallwatch.engine.rules.base import Rules, count_new_fact
from stallwatch.engine.state import RunState


class ResearcherRules(Rules):
    """Rules 1 to 8 of contract v1 as written."""

    def refusal(
        self, state: RunState, event: RawEvent, tool: str, signature: bytes | None, exempt: bool
    ) -> tuple[RefusalCode, str] | None:
        if self.duplicate_call(state, signature, exempt):
            return "duplicate_call", words.duplicate_call(tool)
        return None

    def allow(self, state: RunState, event: RawEvent, signature: bytes | None) -> None:
        if signature is not None:
            state.add_signature(signature)

    def on_result(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        current = event["round"] == state.round and state.round_open
        if current:
            state.round_results += 1
        if self.brings_new_fact(state, event):
            count_new_fact(state, current)
        self.count_failures(state, event, out)

    def duplicate_call(self, state: RunState, signature: bytes | None, exempt: bool) -> bool:
        """Rule 1: the same tool and arguments as a call already allowed to run."""
        return not exempt and signature is not None and signature in state.signatures

    def brings_new_fact(self, state: RunState, event: RawEvent) -> bool:
        """Rule 3: unseen results are new, and so is anything empty, content-less or approved."""
        tool = event["tool"]
        if self.requires_approval(state, tool) or self.repeat_exempt(state, tool):
            return True
        digests = result_digests(event, state.tool_specs.get(tool) if state.tool_specs else None, self.secret)
        if digests is None:
            return True
        new = False
        for found in digests:
            if state.add_fingerprint(found):
                new = True
        return new
