"""Words for the model: every refusal and stop says why and what to do next.

Every name or label taken from an event (a tool, a coder call, a declared tool) goes through
`names.quoted` (or `names.plain` inside a template's own backticks): one line of visible text
as inline code, bounded, so that no event can write the model an instruction of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stallwatch.contract.policy import Policy
from stallwatch.contract.stop_codes import ANSWER, STOPS, stop_words
from stallwatch.engine.names import LABEL_CHARS, NAME_CHARS, plain, quoted

ALLOWED = "Allowed."


def duplicate_call(tool: str) -> str:
    return (
        f"Refused: this exact call to {quoted(tool)} already ran in this run; its result is above. "
        "Use that result, or change the arguments or the approach."
    )


def duplicate_read(tool: str) -> str:
    return (
        f"Refused: this exact call to {quoted(tool)} already ran since the workspace last changed; "
        "its result is above and would be the same. Use that result, or change something "
        "first."
    )


def stall(call: str, runs: int) -> str:
    return (
        f"The last {runs} runs of {quoted(call, LABEL_CHARS)} gave the same result although "
        "changes were made between them: your last changes did not change what it shows. "
        "Look again at why before changing more, or try another approach."
    )


def repeated_call(tool: str, times: int) -> str:
    return (
        f"Refused: this is the {_ordinal(times)} identical call to {quoted(tool)} in a row. You "
        "already have this result in the conversation: use that value. If you need "
        "something else, use a different tool or different arguments."
    )


def repeated_cycle(tools: list[str], times: int) -> str:
    cycle = " -> ".join(quoted(t) for t in tools)
    return (
        f"Refused: the same cycle of calls ({cycle}) has come back with the same results "
        f"{times} times in a row. Going round again will not change them: use what you have, "
        "or do something different."
    )


def nudge(streak: int) -> str:
    return (
        f"Nothing new has come back for {streak} rounds: every result was one you had seen. "
        "Change the approach, or answer from what you have."
    )


def fleet_advisory(kind: str, tool: str, evidence: dict[str, int], window_s: float) -> str:
    """Words for a run about an incident the fleet saw across runs; only the counts given."""
    window, tool = _window(window_s), quoted(tool)
    calls, failures, runs = evidence.get("calls"), evidence.get("failures"), evidence.get("runs")
    if kind == "tool_failing":
        seen = (
            f"failed in {failures} of {calls} calls" if failures is not None and calls else "has been failing"
        )
        across = f" across {runs} runs" if runs else " across many runs"
        return (
            f"{tool} {seen}{across} in {window}: don't retry it; use another tool or "
            "answer from what you have."
        )
    if kind == "tool_same_answer":
        answer_args, answer_runs = evidence.get("answer_args"), evidence.get("answer_runs")
        asked = f"{answer_args} different questions" if answer_args else "different questions"
        across = f" in {answer_runs} runs" if answer_runs else " in many runs"
        return (
            f"{tool} gave the same answer to {asked}{across} in {window}: it may be "
            "returning a stale or fallback result. Don't rely on asking it again; check its "
            "answer another way or answer from what you have."
        )
    stops = evidence.get("stops")
    stopped = f"{stops} runs were" if stops else "Many runs were"
    return (
        f"{stopped} stopped in {window} while looping on {tool}: calling it again the "
        "same way is unlikely to help. Change the approach, or answer from what you have."
    )


def fleet_refused(tool: str) -> str:
    """A call refused under the run's `fleet_breaker` while the tool's incident is open."""
    return (
        f"Refused: {quoted(tool)} is failing in many runs across the fleet right now: don't retry "
        "it; use another tool or answer from what you have."
    )


def _window(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"the last {seconds / 60:g} minutes"
    return f"the last {seconds:g} seconds"


def budget_exhausted(budget: int) -> str:
    return (
        f"Refused: the run's budget of {budget} tool calls is used up. No more tools will "
        "run; answer from what you have gathered."
    )


def run_stopped(stop_reason: str) -> str:
    return f"Refused: tool use for this run has ended. {stop_reason}"


def unknown_run() -> str:
    return "Allowed: stallwatch has no record of this run's start, so it cannot judge this call."


def quarantined() -> str:
    return (
        "Allowed: stallwatch failed on one of this run's events and no longer judges the "
        "run; its calls run unguarded."
    )


def stop_reason(code: str, detail: dict[str, Any]) -> str:
    """The stop's words; its templates quote `{tool}` and `{call}` themselves, so every string
    of `detail` is made plain first (the detail itself keeps the names as they came)."""
    shown = {
        key: plain(value, LABEL_CHARS if key == "call" else NAME_CHARS) if isinstance(value, str) else value
        for key, value in detail.items()
    }
    return stop_words(code, shown)


def system_prompt(mode: str, policy: Policy, exempt_tools: Iterable[str] = ()) -> str:
    """Text a runtime appends to the system prompt so the model knows which calls are refused."""
    exempt = sorted(exempt_tools)
    lines = ["Tool use in this run is watched for loops:"]
    if mode == "researcher":
        lines.append(
            "- A call with exactly the same tool and arguments as one that already ran "
            "is refused; its result is already in the conversation, so use it."
        )
        lines.append(
            f"- After {policy.no_progress_threshold} rounds in a row that bring back "
            "only results you have already seen, tools are removed and you must "
            "answer from what you have gathered. Change the approach, not the wording."
        )
        lines.append(
            f"- After {policy.no_progress_threshold} rounds in a row where every call "
            "is refused, tools are removed as well."
        )
    elif mode == "coder":
        lines.append(
            "- A call that only reads, with exactly the same tool and arguments as one "
            "that ran since the last change, is refused: its result is above."
        )
        lines.append(
            f"- After {policy.no_progress_threshold} rounds in a row that bring back "
            "only results you have already seen, tools are removed and you must "
            "answer from what you have."
        )
        if policy.stall_nudge_at is not None:
            lines.append(
                f"- When a command gives the same result {policy.stall_nudge_at} times "
                "in a row although you changed things between, you will be told."
            )
    else:
        lines.append(
            f"- Calling the same tool with the same arguments {policy.loop_detect_threshold}"
            " times in a row is refused: use the result you already have."
        )
    if mode == "coder":
        lines.append(
            f"- The same call failing {policy.no_progress_threshold} times in a row, "
            "with nothing else changed between, ends tool use."
        )
    else:
        lines.append(f"- A tool that fails {policy.no_progress_threshold} times in a row ends tool use.")
    if policy.fleet_breaker:
        lines.append(
            "- A tool reported failing in many runs across the fleet is refused until "
            "the fleet sees it recover."
        )
    lines.append(f"- At most {policy.max_rounds} rounds of tool use.")
    if policy.call_budget is not None:
        lines.append(f"- At most {policy.call_budget} tool calls in all.")
    if policy.time_limit_s is not None:
        lines.append(f"- At most {policy.time_limit_s:g} seconds in all.")
    if exempt:
        lines.append(
            f"- These tools may be called again with the same arguments (waiting is "
            f"their protocol): {', '.join(quoted(t) for t in exempt)}."
        )
    return "\n".join(lines)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def stop_reason_short(code: str) -> str:
    """One sentence for the refusals that follow a stop; the stop itself said the rest."""
    return f"{STOPS[code].short} {ANSWER}"
