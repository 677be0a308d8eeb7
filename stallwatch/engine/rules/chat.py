"""Chat mode (contract v1): the same call back to back, a cycle of calls, a refusal as a failure."""

from __future__ import annotations

from stallwatch.contract.commands import Command, RefusalCode
from stallwatch.contract.events import RawEvent
from stallwatch.engine import words
from stallwatch.engine.canonical import canonical_bytes, digest, parse_json_text
from stallwatch.engine.rules.base import Rules
from stallwatch.engine.state import MAX_CHAT_HISTORY, RunState

# Chat cycles of 2 to 4 calls; the history keeps enough for the longest at its threshold.
_CYCLE_LENGTHS = (2, 3, 4)


class ChatRules(Rules):
    """Chat rules: no new-fact or all-refused streaks (a chat's calls answer the user)."""

    def refusal(
        self, state: RunState, event: RawEvent, tool: str, signature: bytes | None, exempt: bool
    ) -> tuple[RefusalCode, str] | None:
        if self.repeated_call(state, signature, exempt):
            return "repeated_call", words.repeated_call(tool, state.repeat_count)
        threshold = state.policy.cycle_threshold
        if threshold is not None and (cycle := self.repeated_cycle(state, signature, exempt, threshold)):
            self.remember_call(state, event, signature, threshold)
            return "repeated_cycle", words.repeated_cycle(cycle, threshold)
        return None

    def allow(self, state: RunState, event: RawEvent, signature: bytes | None) -> None:
        if (threshold := state.policy.cycle_threshold) is not None:
            self.remember_call(state, event, signature, threshold)

    def refused(self, state: RunState, event: RawEvent, tool: str, out: list[Command]) -> None:
        """Chat rule 2: a refused call counts as a failure of its tool."""
        self.tool_failures(state, event, tool, out, refused=True)

    def on_result(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        if state.policy.cycle_threshold is not None:
            self.remember_result(state, event)
        self.count_failures(state, event, out)

    def close_round(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        self.call_budget(state, event, out)
        self.round_limit(state, event, out)

    def repeated_call(self, state: RunState, signature: bytes | None, exempt: bool) -> bool:
        """Chat rule 1: the same call back to back, `loop_detect_threshold` times or more."""
        if signature is not None and signature == state.last_signature:
            state.repeat_count += 1
        else:
            state.last_signature = signature
            state.repeat_count = 1
        return not exempt and state.repeat_count >= state.policy.loop_detect_threshold

    def repeated_cycle(self, state: RunState, signature: bytes | None, exempt: bool, times: int) -> list[str]:
        """Chat, with `cycle_threshold`: the same 2 to 4 calls with the same results, again and
        again. Returns the cycle's tools when this call would go round once more."""
        if exempt or signature is None:
            return []
        history = state.chat_history
        for length in _CYCLE_LENGTHS:
            window = history[-length * times :]
            if len(window) < length * times or window[0][0] != signature.hex():
                continue
            block = window[:length]
            if len({entry[0] for entry in block}) < 2:
                continue  # one call repeated: the back-to-back rule's case
            if all(
                entry[1] is not None and entry[:2] == block[i % length][:2] for i, entry in enumerate(window)
            ):
                return [entry[3] for entry in block]
        return []

    def remember_call(
        self, state: RunState, event: RawEvent, signature: bytes | None, threshold: int
    ) -> None:
        state.chat_history.append(
            [signature.hex() if signature else None, None, event["call_id"], event["tool"]]
        )
        del state.chat_history[: -min(max(_CYCLE_LENGTHS) * (threshold + 1), MAX_CHAT_HISTORY)]

    def remember_result(self, state: RunState, event: RawEvent) -> None:
        """Chat cycles compare results too: a poll whose answer changes is never a cycle."""
        for entry in reversed(state.chat_history):
            if entry[2] == event["call_id"]:
                if "result" in event:
                    try:
                        content = canonical_bytes(parse_json_text(event["result"]))
                    except ValueError:
                        return
                elif event.get("fingerprint") is not None:
                    content = event["fingerprint"].encode()
                else:
                    return  # no content: unknown, so never part of a cycle
                entry[1] = digest(event["status"].encode() + b"\x00" + content, self.secret).hex()
                return
