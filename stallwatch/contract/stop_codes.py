"""Every stop code in one registry: its action, its words, the counter its metric observes, its detail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Every stop code, in the registry's order (tests/contract/test_stop_codes.py holds them equal):
# the type the checker and the commands' JSON Schema read.
StopCode = Literal[
    "no_new_facts", "all_refused", "tool_failures", "round_limit", "call_budget", "time_limit", "no_effect"
]
StopAction = Literal["answer_without_tools", "end_turn"]

# The close of every stop that leaves the model to answer without tools.
ANSWER = "Answer now from what you have gathered; say plainly what is still unknown."


@dataclass(frozen=True, slots=True)
class StopKind:
    """What one stop code means, said once."""

    action: StopAction
    fired: str  # the detail key of the counter that reached its limit (a histogram observes it)
    detail_keys: tuple[str, ...]  # what every stop of this code carries in `detail`
    words: str  # the stop's reason: a format string over `detail` (and `answer`)
    short: str  # one sentence for the refusals that follow the stop
    # (detail key naming what failed or stalled, the heading operators' views list it under)
    subject: tuple[str, str] | None = None
    # The words when `detail["refused"]` is true: the last call was refused, not failed.
    words_refused: str | None = None


STOPS: dict[str, StopKind] = {
    "no_new_facts": StopKind(
        "answer_without_tools",
        "already_seen_streak",
        ("already_seen_streak", "all_refused_streak", "threshold", "round"),
        "Stopped: the last {already_seen_streak} rounds brought nothing new; every result had "
        "been seen before. Tools are removed. {answer}",
        "Recent rounds brought nothing new.",
    ),
    "all_refused": StopKind(
        "answer_without_tools",
        "all_refused_streak",
        ("already_seen_streak", "all_refused_streak", "threshold", "round"),
        "Stopped: in each of the last {all_refused_streak} rounds every call was refused. Tools "
        "are removed. {answer}",
        "Every call of recent rounds was refused.",
    ),
    "tool_failures": StopKind(
        "answer_without_tools",
        "consecutive_failures",
        ("tool", "consecutive_failures", "threshold"),
        "Stopped: `{tool}` failed {consecutive_failures} times in a row. Tools are removed. "
        "{answer} Mention that `{tool}` was failing.",
        "A tool kept failing.",
        subject=("tool", "stopped for failing"),
        words_refused="Stopped: the last {consecutive_failures} calls of `{tool}` were refused or "
        "failed (chat mode counts a refused repeat as a failure). Tools are removed. {answer} Do "
        "not call `{tool}` the same way again.",
    ),
    "round_limit": StopKind(
        "answer_without_tools",
        "round",
        ("round", "max_rounds", "extra_rounds"),
        "Stopped: the run reached its limit of {max_rounds} rounds. Tools are removed. {answer}",
        "The round limit was reached.",
    ),
    "call_budget": StopKind(
        "answer_without_tools",
        "executed_calls",
        ("executed_calls", "call_budget"),
        "Stopped: the run used its budget of {call_budget} tool calls. Tools are removed. {answer}",
        "The call budget is used up.",
    ),
    "time_limit": StopKind(
        "end_turn",
        "elapsed_s",
        ("elapsed_s", "time_limit_s"),
        "Stopped: the run passed its time limit of {time_limit_s:g} s. End the turn now with what you have.",
        "The time limit passed.",
    ),
    "no_effect": StopKind(
        "answer_without_tools",
        "same_result_runs",
        ("call", "tool", "same_result_runs", "stall_stop_at", "workspace_version"),
        "Stopped: the last {same_result_runs} runs of `{call}` gave the same result, with changes "
        "made between them: the changes are not having an effect. Tools are removed. {answer}",
        "Changes kept having no effect on a call's result.",
        subject=("call", "stopped for changes without effect"),
    ),
}

STOP_CODES: tuple[str, ...] = tuple(STOPS)


def stop_words(code: str, detail: dict[str, Any]) -> str:
    """The reason a stop of `code` gives the model."""
    try:
        kind = STOPS[code]
    except KeyError:
        raise ValueError(f"no words for stop code {code!r}") from None
    words = kind.words_refused if detail.get("refused") and kind.words_refused else kind.words
    return words.format(answer=ANSWER, **detail)
