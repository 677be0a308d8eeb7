"""The detector: applies one event to one run's state and returns the commands it causes.

Pure: no I/O, no clock (time is the events' `ts`). One method per loop it catches.
"""

from __future__ import annotations

from hashlib import blake2b

from stallwatch.contract.commands import Stop, Verdict
from stallwatch.contract.events import (
    CallProposed,
    CallResult,
    Event,
    RoundEnded,
    RoundStarted,
    RunEnded,
    RunStarted,
)
from stallwatch.engine import words
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import DIGEST_SIZE, call_signature, is_empty, result_fingerprint
from stallwatch.engine.state import RunState

Command = Verdict | Stop

# Stops after which the model writes its answer without tools; the rest end the turn at once.
_END_TURN_CODES = frozenset({"time_limit"})
_FAILED = frozenset({"error", "overloaded"})


class Detector:
    """Applies the rules of contract v1 to one run's state at a time."""

    def __init__(self, admin_policy: AdminPolicy | None = None) -> None:
        self.admin_policy = admin_policy or AdminPolicy()

    def apply(self, state: RunState | None, event: Event) -> tuple[RunState | None, list[Command]]:
        """Apply one event. `state` is None for a run not seen yet; the state is changed in place."""
        out = _Commands(event)
        if state is None:
            if isinstance(event, RunStarted):
                state = self._start(event)
            elif isinstance(event, CallProposed):
                # Fail open, as the client does on a timeout: no record, no grounds to refuse.
                out.verdict(event, "allow", None, words.unknown_run())
            return state, out.commands
        if not _first_delivery(state, event.event_id):
            return state, out.commands
        state.last_ts = event.ts
        if state.ended:
            if isinstance(event, CallProposed):
                out.verdict(event, "refuse", "run_stopped", words.run_stopped("The run has ended."))
            return state, out.commands
        if state.stop_code is None:
            self._time_limit(state, event, out)
        if isinstance(event, CallProposed):
            self._on_call(state, event, out)
        elif isinstance(event, CallResult):
            self._on_result(state, event, out)
        elif isinstance(event, RoundStarted):
            self._enter_round(state, event.round, out)
        elif isinstance(event, RoundEnded):
            self._enter_round(state, event.round, out)
            self._close_round(state, out)
        elif isinstance(event, RunEnded):
            state.release()
        return state, out.commands

    # -- run and round lifecycle ------------------------------------------------------------

    def _start(self, event: RunStarted) -> RunState:
        p = event.policy
        exempt = [t.name for t in event.tools if t.repeat_exempt]
        approval = [t.name for t in event.tools if t.requires_approval]
        state = RunState(
            mode=event.mode, started_ts=event.ts, last_ts=event.ts,
            no_progress_threshold=p.no_progress_threshold,
            loop_detect_threshold=p.loop_detect_threshold, max_rounds=p.max_rounds,
            call_budget=p.call_budget, overloaded_exempt_max=p.overloaded_exempt_max,
            time_limit_s=p.time_limit_s, exempt_tools=exempt, approval_tools=approval,
        )
        _first_delivery(state, event.event_id)
        return state

    def _enter_round(self, state: RunState, number: int, out: _Commands) -> None:
        """Open round `number`, closing the open one first when a runtime skipped its round_ended."""
        if number <= state.round:
            return
        if state.round_open:
            self._close_round(state, out)
        state.round = number
        state.round_open = True
        state.round_proposed = state.round_allowed = state.round_results = 0
        state.round_new_fact = state.round_exempt_overloaded = False

    def _close_round(self, state: RunState, out: _Commands) -> None:
        if not state.round_open:
            return
        state.round_open = False
        if state.round_exempt_overloaded:
            state.extra_rounds += 1
        if state.stop_code is not None:
            return
        if state.mode == "researcher":
            self._all_refused(state, out)
            self._no_new_facts(state, out)
        self._call_budget(state, out)
        self._round_limit(state, out)

    # -- calls ------------------------------------------------------------------------------

    def _on_call(self, state: RunState, event: CallProposed, out: _Commands) -> None:
        self._enter_round(state, event.round, out)
        state.round_proposed += 1
        if state.stop_code is not None:
            reason = words.run_stopped(words.stop_reason_short(state.stop_code))
            out.verdict(event, "refuse", "run_stopped", reason)
            return
        try:
            signature = call_signature(event.tool, event.args)
        except ValueError:
            signature = None  # arguments that cannot be compared are never called a repeat
        _, exempt = self._marks(state, event.tool)
        if state.call_budget is not None and state.executed_calls >= state.call_budget:
            self._refuse(state, event, "budget_exhausted", words.budget_exhausted(state.call_budget),
                         out)
        elif state.mode == "researcher" and self._duplicate_call(state, signature, exempt):
            self._refuse(state, event, "duplicate_call", words.duplicate_call(event.tool), out)
        elif state.mode == "chat" and self._repeated_call(state, signature, exempt):
            self._refuse(state, event, "repeated_call",
                         words.repeated_call(event.tool, state.repeat_count), out)
        else:
            if signature is not None and state.mode == "researcher":
                state.signatures.add(signature)
            state.round_allowed += 1
            state.executed_calls += 1
            out.verdict(event, "allow", None, words.ALLOWED)

    def _refuse(self, state: RunState, event: CallProposed, code: str, reason: str,
                out: _Commands) -> None:
        out.verdict(event, "refuse", code, reason)
        if state.mode == "chat":  # chat rule 2: a refused call counts as a failure of its tool
            self._tool_failures(state, event.tool, failed=True, out=out)

    def _duplicate_call(self, state: RunState, signature: bytes | None, exempt: bool) -> bool:
        """Researcher rule 1: the same tool and arguments as a call already allowed to run."""
        return not exempt and signature is not None and signature in state.signatures

    def _repeated_call(self, state: RunState, signature: bytes | None, exempt: bool) -> bool:
        """Chat rule 1: the same call back to back, `loop_detect_threshold` times or more."""
        if signature is not None and signature == state.last_signature:
            state.repeat_count += 1
        else:
            state.last_signature = signature
            state.repeat_count = 1
        return not exempt and state.repeat_count >= state.loop_detect_threshold

    # -- results ----------------------------------------------------------------------------

    def _on_result(self, state: RunState, event: CallResult, out: _Commands) -> None:
        if state.stop_code is not None:
            return
        failed = event.status in _FAILED
        if event.status == "overloaded" and state.overloaded_exempted < state.overloaded_exempt_max:
            # Rule 6: not charged to the budget, and the round limit grows for its round.
            state.overloaded_exempted += 1
            state.executed_calls -= 1
            state.round_exempt_overloaded = True
        if state.mode == "researcher":
            current = event.round == state.round and state.round_open
            if current:
                state.round_results += 1
            if self._brings_new_fact(state, event):
                if current:
                    state.round_new_fact = True
                else:  # a late result that is new is progress all the same
                    state.already_seen_streak = 0
        self._tool_failures(state, event.tool, failed=failed, out=out)

    def _brings_new_fact(self, state: RunState, event: CallResult) -> bool:
        """Rule 3: unseen results are new, and so is anything empty, content-less or approved."""
        approval, exempt = self._marks(state, event.tool)
        if approval or exempt:
            return True
        if event.fingerprint is not None and not event.has_result:
            if event.empty:
                return True
            digest = _fingerprint_digest(event.fingerprint)
        elif event.has_result:
            try:
                if is_empty(event.result):
                    return True
                digest = bytes.fromhex(result_fingerprint(event.result))
            except ValueError:
                return True  # content that cannot be put in canonical form: lean to "new"
        else:
            return True
        if digest in state.fingerprints:
            return False
        state.fingerprints.add(digest)
        return True

    def _marks(self, state: RunState, tool: str) -> tuple[bool, bool]:
        admin_approval, admin_exempt = self.admin_policy.marks(tool)
        return (admin_approval or tool in state.approval_tools,
                admin_exempt or tool in state.exempt_tools)

    # -- the stops, one per loop ----------------------------------------------------------------

    def _tool_failures(self, state: RunState, tool: str, failed: bool, out: _Commands) -> None:
        """Rule 5 (chat rule 2): one tool failing again and again."""
        if not failed:
            state.failures.pop(tool, None)
            return
        count = state.failures[tool] = state.failures.get(tool, 0) + 1
        if count >= state.no_progress_threshold and state.stop_code is None:
            self._stop(state, "tool_failures", {"tool": tool, "consecutive_failures": count,
                                                "threshold": state.no_progress_threshold}, out)

    def _no_new_facts(self, state: RunState, out: _Commands) -> None:
        """Rule 2: rounds whose calls ran and brought back only results seen before."""
        if state.round_allowed == 0:
            return  # nothing ran: the already-seen streak stays as it was (rule 4)
        missing_results = state.round_results < state.round_allowed
        if state.round_new_fact or missing_results:  # a call with no result counts as new
            state.already_seen_streak = 0
            return
        state.already_seen_streak += 1
        if state.already_seen_streak >= state.no_progress_threshold:
            self._stop(state, "no_new_facts", self._streaks(state), out)

    def _all_refused(self, state: RunState, out: _Commands) -> None:
        """Rule 4: rounds in which every proposed call was refused."""
        if state.round_allowed > 0:
            state.all_refused_streak = 0
        elif state.round_proposed > 0:
            state.all_refused_streak += 1
            if state.all_refused_streak >= state.no_progress_threshold:
                self._stop(state, "all_refused", self._streaks(state), out)

    def _call_budget(self, state: RunState, out: _Commands) -> None:
        """Rule 7: the executed-call count reached the budget during this round."""
        if state.stop_code is None and state.call_budget is not None \
                and state.executed_calls >= state.call_budget:
            self._stop(state, "call_budget", {"executed_calls": state.executed_calls,
                                              "call_budget": state.call_budget}, out)

    def _round_limit(self, state: RunState, out: _Commands) -> None:
        """Rule 8: the end of round `max_rounds`, as grown by exempted overloaded calls."""
        limit = state.max_rounds + state.extra_rounds
        if state.stop_code is None and state.round >= limit:
            self._stop(state, "round_limit", {"round": state.round, "max_rounds": limit,
                                              "extra_rounds": state.extra_rounds}, out)

    def _time_limit(self, state: RunState, event: Event, out: _Commands) -> None:
        """Rule 8: the first event more than `time_limit_s` after run_started, by event time."""
        if state.time_limit_s is not None and event.ts - state.started_ts > state.time_limit_s:
            self._stop(state, "time_limit", {"elapsed_s": round(event.ts - state.started_ts, 3),
                                             "time_limit_s": state.time_limit_s}, out)

    def _streaks(self, state: RunState) -> dict[str, int]:
        return {"already_seen_streak": state.already_seen_streak,
                "all_refused_streak": state.all_refused_streak,
                "threshold": state.no_progress_threshold, "round": state.round}

    def _stop(self, state: RunState, code: str, detail: dict, out: _Commands) -> None:
        state.stop_code = code
        action = "end_turn" if code in _END_TURN_CODES else "answer_without_tools"
        out.stop(state.round, code, action, words.stop_reason(code, detail), detail)


class _Commands:
    """The commands one event causes, with ids derived from the event so they are deterministic."""

    __slots__ = ("commands", "event")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.commands: list[Command] = []

    def _next_id(self) -> str:
        seed = f"{self.event.run_id}\x00{self.event.event_id}\x00{len(self.commands)}"
        return blake2b(seed.encode(), digest_size=12).hexdigest()

    def verdict(self, event: CallProposed, decision: str, code: str | None, reason: str) -> None:
        self.commands.append(Verdict.model_construct(
            command_id=self._next_id(), run_id=event.run_id, caused_by=event.event_id,
            call_id=event.call_id, round=event.round, decision=decision, code=code, reason=reason))

    def stop(self, round_: int, code: str, action: str, reason: str, detail: dict) -> None:
        self.commands.append(Stop.model_construct(
            command_id=self._next_id(), run_id=self.event.run_id, caused_by=self.event.event_id,
            round=round_, code=code, action=action, reason=reason, detail=detail))


def _first_delivery(state: RunState, event_id: str) -> bool:
    """Record the event id; False when it was seen before (a redelivery)."""
    digest = blake2b(event_id.encode(), digest_size=8).digest()
    if digest in state.event_ids:
        return False
    state.event_ids.add(digest)
    return True


def _fingerprint_digest(fingerprint: str) -> bytes:
    """A runtime's fingerprint as 16 bytes: ours is hex already; any other text is hashed."""
    if len(fingerprint) == 2 * DIGEST_SIZE:
        try:
            return bytes.fromhex(fingerprint)
        except ValueError:
            pass
    return blake2b(fingerprint.encode(), digest_size=DIGEST_SIZE).digest()
