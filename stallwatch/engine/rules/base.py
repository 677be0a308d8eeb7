"""What every mode's rules answer to the detector, and the loops every mode catches."""

from __future__ import annotations

from typing import Any, Literal

from xxhash import xxh3_128_hexdigest

from stallwatch.contract.commands import Command, Nudge, RefusalCode, Stop, Verdict, content_id
from stallwatch.contract.events import FAILED_STATUSES, RawEvent
from stallwatch.contract.stop_codes import STOPS, StopCode
from stallwatch.engine import words
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.state import RunState


class Rules:
    """One mode's rules, one method per loop it catches. The detector keeps the run's
    lifecycle (rounds, redeliveries, the call budget, the end) and asks the run's mode what
    each call and result means; the contract's shared rules are here, a mode overrides them."""

    def __init__(self, admin_policy: AdminPolicy, secret: bytes | None) -> None:
        self.admin_policy = admin_policy
        self.secret = secret

    # -- what the detector asks ------------------------------------------------------------

    def start(self, state: RunState, tools: list[dict[str, Any]]) -> None:
        """A new run of this mode, its declarations stored."""

    def refusal(
        self, state: RunState, event: RawEvent, tool: str, signature: bytes | None, exempt: bool
    ) -> tuple[RefusalCode, str] | None:
        """Why this call (within the budget) is refused, as (code, reason); None: allowed."""
        return None

    def allow(self, state: RunState, event: RawEvent, signature: bytes | None) -> None:
        """Remember a call allowed to run."""

    def refused(self, state: RunState, event: RawEvent, tool: str, out: list[Command]) -> None:
        """After a refusal's verdict."""

    def on_result(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """A result of a run not stopped, its overloaded exemption already counted."""
        raise NotImplementedError

    def close_round(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """The stops judged when a round of a run not stopped closes."""
        self.all_refused(state, event, out)
        self.no_new_facts(state, event, out)
        self.call_budget(state, event, out)
        self.round_limit(state, event, out)

    def annotate_stop(self, state: RunState, detail: dict[str, Any]) -> None:
        """Add what this mode tells of a stop to its detail."""

    # -- the loops every mode catches ------------------------------------------------------

    def tool_failures(
        self, state: RunState, event: RawEvent, tool: str, out: list[Command], refused: bool = False
    ) -> None:
        """Rule 5 (chat rule 2): one tool failing again and again. A success resets its count
        (`count_failures`). `refused`: the call that reached the limit was refused, not failed
        (the stop's words must not say the tool failed)."""
        count = state.count_failure(tool)
        threshold = state.policy.no_progress_threshold
        if count >= threshold and state.stop_code is None:
            detail = {"tool": tool, "consecutive_failures": count, "threshold": threshold}
            self.stop(state, event, "tool_failures", detail | ({"refused": True} if refused else {}), out)

    def no_new_facts(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """Rule 2: rounds whose calls ran and brought back only results seen before."""
        if state.round_allowed == 0:
            return  # nothing ran: the already-seen streak stays as it was (rule 4)
        missing_results = state.round_results < state.round_allowed
        if state.round_new_fact or missing_results:  # a call with no result counts as new
            state.already_seen_streak = 0
            state.nudged = False
            return
        state.already_seen_streak += 1
        nudge_at = state.policy.nudge_at
        if state.already_seen_streak >= state.policy.no_progress_threshold:
            self.stop(state, event, "no_new_facts", _streaks(state), out, closing=True)
        elif nudge_at is not None and state.already_seen_streak >= nudge_at and not state.nudged:
            state.nudged = True
            nudge(
                out,
                event,
                state.round,
                words.nudge(state.already_seen_streak),
                {"already_seen_streak": state.already_seen_streak, "nudge_at": nudge_at},
            )

    def all_refused(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """Rule 4: rounds in which every proposed call was refused."""
        if state.round_allowed > 0:
            state.all_refused_streak = 0
        elif state.round_proposed > 0:
            state.all_refused_streak += 1
            if state.all_refused_streak >= state.policy.no_progress_threshold:
                self.stop(state, event, "all_refused", _streaks(state), out, closing=True)

    def call_budget(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """Rule 7: the executed-call count reached the budget during this round."""
        budget = state.policy.call_budget
        if state.stop_code is None and budget is not None and state.executed_calls >= budget:
            self.stop(
                state,
                event,
                "call_budget",
                {"executed_calls": state.executed_calls, "call_budget": budget},
                out,
                closing=True,
            )

    def round_limit(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """Rule 8: the end of round `max_rounds`, as grown by exempted overloaded calls."""
        limit = state.policy.max_rounds + state.extra_rounds
        if state.stop_code is None and state.round >= limit:
            self.stop(
                state,
                event,
                "round_limit",
                {"round": state.round, "max_rounds": limit, "extra_rounds": state.extra_rounds},
                out,
                closing=True,
            )

    def time_limit(
        self, state: RunState, event: RawEvent, ts: float, limit: float, out: list[Command]
    ) -> None:
        """Rule 8: the first event more than `limit` (the policy's `time_limit_s`) after
        run_started, by event time."""
        if ts - state.started_ts > limit:
            self.stop(
                state,
                event,
                "time_limit",
                {"elapsed_s": round(ts - state.started_ts, 3), "time_limit_s": limit},
                out,
            )

    # -- shared by the modes ---------------------------------------------------------------

    def count_failures(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """A failed result counts towards its tool's streak; a success resets it."""
        if event["status"] in FAILED_STATUSES:
            self.tool_failures(state, event, event["tool"], out)
        elif state.failures:
            state.failures.pop(event["tool"], None)

    def requires_approval(self, state: RunState, tool: str) -> bool:
        return tool in state.approval_tools or self.admin_policy.requires_approval(tool)

    def repeat_exempt(self, state: RunState, tool: str) -> bool:
        return tool in state.exempt_tools or self.admin_policy.repeat_exempt(tool)

    def stop(
        self,
        state: RunState,
        event: RawEvent,
        code: StopCode,
        detail: dict[str, Any],
        out: list[Command],
        closing: bool = False,
    ) -> None:
        """`closing`: a stop at the close of the open round carries that round; any other stop
        carries the round of the event that caused it (round 6's round_started says 6)."""
        state.stop_code = code
        self.annotate_stop(state, detail)
        round_no = state.round if closing else event.get("round", state.round)
        command = Stop(
            command_id=command_id(event, len(out)),
            run_id=event["run_id"],
            caused_by=event["event_id"],
            round=round_no,
            code=code,
            action=STOPS[code].action,
            reason=words.stop_reason(code, detail),
            detail=detail,
        )
        command.command_id = content_id(command)
        out.append(command)


def command_id(event: RawEvent, index: int) -> str:
    """Derived from the causing event, so the same input always yields the same ids. Each
    command is then given its final id, this and its whole content digested (`content_id`), so
    one id never carries two contents: built complete, a command is never changed after."""
    return xxh3_128_hexdigest(f"{event['run_id']}\x00{event['event_id']}\x00{index}".encode())[:24]


def verdict(
    out: list[Command],
    event: RawEvent,
    decision: Literal["allow", "refuse"],
    code: RefusalCode | None,
    reason: str,
) -> None:
    command = Verdict(
        command_id=command_id(event, len(out)),
        run_id=event["run_id"],
        caused_by=event["event_id"],
        call_id=event["call_id"],
        round=event["round"],
        decision=decision,
        code=code,
        reason=reason,
        tool=event["tool"],
    )
    command.command_id = content_id(command)
    out.append(command)


def nudge(out: list[Command], event: RawEvent, round_no: int, reason: str, detail: dict[str, Any]) -> None:
    command = Nudge(
        command_id=command_id(event, len(out)),
        run_id=event["run_id"],
        caused_by=event["event_id"],
        round=round_no,
        reason=reason,
        detail=detail,
    )
    command.command_id = content_id(command)
    out.append(command)


def count_new_fact(state: RunState, current: bool) -> None:
    """A result that brought a new fact: its round brought one, or, for a late result, the
    already-seen streak ends all the same (late progress is progress)."""
    if current:
        state.round_new_fact = True
    else:
        state.already_seen_streak = 0
        state.nudged = False


def _streaks(state: RunState) -> dict[str, int]:
    return {
        "already_seen_streak": state.already_seen_streak,
        "all_refused_streak": state.all_refused_streak,
        "threshold": state.policy.no_progress_threshold,
        "round": state.round,
    }
