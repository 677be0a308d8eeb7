"""CodeAct-style trajectories (a bash tool and a file editor) as neutral runs."""

# Two recorded shapes of the same tools: OpenHands' chat messages with OpenAI `tool_calls`
# (`execute_bash`, `str_replace_editor`, `finish`; the SWE-Gym sampled trajectories), and
# SWE-agent's function calls written as text (`<function=bash>`, `<parameter=command>`; the
# SWE-smith trajectories). Each assistant message is one model step; each call's observation
# is the tool message (or the next user message) answering it.
#
# Status: `error` when a bash observation reports a non-zero exit code or a timeout, or when an
# observation opens with the editor's `ERROR:`; `ok` otherwise. Effects: the editor's `view`
# reads, its other commands write; a bash command reads only by `shell_effect`'s rule for
# a persistent shell (both keep one shell session for the whole run).

from __future__ import annotations

import json
import re
from typing import Any

from benchmarks.trajectories.runlog import Call, Effect, Trajectory
from stallwatch.engine.shell import shell_effect

_EXIT_CODE = re.compile(r"\[Command finished with exit code (-?\d+)\]")
_TIMED_OUT = ("[Command timed out", "command timed out")
_FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([\w.-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_BASH_TOOLS = frozenset({"bash", "execute_bash"})
_EDITOR = "str_replace_editor"


def tools(names: list[str]) -> list[dict[str, Any]]:
    """The run's tools; each call declares its own effect, so the tool default is unknown."""
    return [{"name": name, "effect": "unknown"} for name in names]


def convert_openhands(record: dict[str, Any], framework: str = "openhands") -> Trajectory:
    """A SWE-Gym style record: `messages` with OpenAI tool calls, `resolved` beside them."""
    names = [t["function"]["name"] for t in record.get("tools") or [] if "function" in t]
    out = Trajectory(
        framework,
        record.get("run_id", "") + "/" + record["instance_id"],
        bool(record.get("resolved")),
        tools(names or ["execute_bash", _EDITOR, "finish"]),
    )
    answers = {m.get("tool_call_id"): m for m in record["messages"] if m["role"] == "tool"}
    for message in record["messages"]:
        if message["role"] != "assistant":
            continue
        step = []
        for tool_call in message.get("tool_calls") or []:
            function = tool_call["function"]
            args = _arguments(function.get("arguments"))
            answer = answers.get(tool_call.get("id"))
            step.append(_call(function["name"], args, _text(answer) if answer else ""))
        out.steps.append(step)
    return out


def convert_function_text(record: dict[str, Any], framework: str = "swe-agent") -> Trajectory:
    """A SWE-smith style record: calls written as `<function=...>` text, observations as the
    next user message."""
    messages = record["messages"]
    out = Trajectory(
        framework, record["instance_id"], bool(record.get("resolved")), tools(["bash", _EDITOR, "submit"])
    )
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        answer = (
            messages[i + 1] if i + 1 < len(messages) and messages[i + 1]["role"] in ("user", "tool") else None
        )
        step = []
        for name, body in _FUNCTION.findall(_text(message)):
            args = {key: value for key, value in _PARAMETER.findall(body)}
            step.append(_call(name, args, _text(answer) if answer else ""))
        out.steps.append(step)
    return out


def _call(tool: str, args: dict[str, Any], observation: str) -> Call:
    output = observation.removeprefix("OBSERVATION:\n")
    return Call(tool, args, _status(tool, output), output, _effect(tool, args))


def _status(tool: str, output: str) -> str:
    if output.lstrip().startswith("ERROR"):
        return "error"
    if tool in _BASH_TOOLS:
        if any(marker in output for marker in _TIMED_OUT):
            return "error"
        codes = _EXIT_CODE.findall(output)
        if codes and codes[-1] != "0":
            return "error"
    return "ok"


def _effect(tool: str, args: dict[str, Any]) -> Effect:
    if tool == _EDITOR:
        return "read" if args.get("command") == "view" else "write"
    if tool in _BASH_TOOLS:
        return shell_effect(str(args.get("command", "")), persistent=True)
    return "unknown"


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparsed": raw}  # the model's broken JSON, kept as the call's identity
    return value if isinstance(value, dict) else {"_value": value}


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
