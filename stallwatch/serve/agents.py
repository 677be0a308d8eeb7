"""What each coding agent's hooks send and expect: event names, tool effects, answers.

A hook payload is the agent's; the server turns it into the client's calls (hooks.py). Each
agent here says what its fields mean and how a refusal, a stop and a nudge are written back."""

from __future__ import annotations

from typing import Any

import re2

from stallwatch.engine.shell import shell_effect

# Claude Code's tool for a background job's output, declared a repeat-exempt read: polls of the
# job's output file are judged as it.
POLL_TOOL = "TaskOutput"
# Words marking stallwatch's notes beside a tool's result, so the model knows who speaks.
NOTE = "[stallwatch] "


class Agent:
    name = ""
    pre_events: frozenset[str] = frozenset()
    post_events: frozenset[str] = frozenset()
    failure_events: frozenset[str] = frozenset()
    # Events that fire once per model request: the round before it has ended.
    model_events: frozenset[str] = frozenset()
    # Whether the session transcript says which model response holds each call (Claude Code's
    # `message.id`); elsewhere rounds come from model-request hooks, or the gap rule.
    transcript_rounds = False
    # A new user prompt: a stopped run gives way to a new one.
    prompt_events: frozenset[str] = frozenset()
    end_events: frozenset[str] = frozenset()
    tools: tuple[dict[str, Any], ...] = ()
    shell_tools: frozenset[str] = frozenset()
    # Whether the agent's shell keeps one session (and its `cd`) from call to call.
    persistent_shell = False
    # Argument names that describe a call without changing it: not part of its signature.
    ignored_args: frozenset[str] = frozenset({"description"})

    def call_args(self, payload: dict[str, Any]) -> Any:
        args = payload.get("tool_input")
        if isinstance(args, dict):
            return {k: v for k, v in args.items() if k not in self.ignored_args}
        return args

    def judged_tool(self, tool: str, args: Any) -> str:
        """The tool a call is judged as: its own, unless the agent marks it as something else."""
        return tool

    def call_effect(self, tool: str, args: Any) -> str | None:
        """A shell command's effect by the read rule; None: the tool's declared effect."""
        if tool in self.shell_tools and isinstance(args, dict):
            command = args.get("command")
            if isinstance(command, str):
                return shell_effect(command, persistent=self.persistent_shell)
            return "unknown"
        return None

    def result_view(self, payload: dict[str, Any]) -> Any:
        return payload.get("tool_response", payload.get("error"))

    def failed(self, payload: dict[str, Any]) -> bool:
        return payload.get("hook_event_name") in self.failure_events

    def deny(self, event: str, reason: str, stop: str | None) -> dict[str, Any]:
        """Refuse the call with `reason`; with `stop`, also end the run where the agent can."""
        raise NotImplementedError

    def after(self, event: str, notes: list[str]) -> dict[str, Any]:
        """The answer to a result hook: nudges as context for the model, where the agent takes it."""
        return {}


def _pre_tool_deny(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def _context(event: str, notes: list[str]) -> dict[str, Any]:
    if not notes:
        return {}
    return {
        "hookSpecificOutput": {
            "hookEventName": event,
            "additionalContext": "\n".join(NOTE + n for n in notes),
        }
    }


class Claude(Agent):
    """Claude Code: `PreToolUse`, `PostToolUse`, `PostToolUseFailure`; command or http hooks."""

    name = "claude"
    pre_events = frozenset({"PreToolUse"})
    post_events = frozenset({"PostToolUse", "PostToolUseFailure"})
    failure_events = frozenset({"PostToolUseFailure"})
    prompt_events = frozenset({"UserPromptSubmit"})
    end_events = frozenset({"SessionEnd"})
    tools = (
        *({"name": n, "effect": "read"} for n in ("Read", "Grep", "Glob", "LS")),
        *({"name": n, "effect": "write"} for n in ("Edit", "Write", "MultiEdit", "NotebookEdit")),
        # Waits on a background shell: the same poll may rightly be repeated.
        *({"name": n, "effect": "read", "repeat_exempt": True} for n in ("BashOutput", POLL_TOOL)),
    )
    shell_tools = frozenset({"Bash"})
    persistent_shell = True  # Claude Code keeps the working directory from call to call
    transcript_rounds = True

    def call_effect(self, tool: str, args: Any) -> str | None:
        if tool == "Bash" and isinstance(args, dict) and args.get("run_in_background"):
            return "unknown"  # its answer is a shell id; what it does comes later
        return super().call_effect(tool, args)

    def judged_tool(self, tool: str, args: Any) -> str:
        # A look at a background job's output is a poll, judged as the declared poll tool:
        # repeat_exempt, so waiting on a slow job is never refused nor counted as stale.
        return POLL_TOOL if _polls_a_background_task(tool, args) else tool

    def deny(self, event: str, reason: str, stop: str | None) -> dict[str, Any]:
        answer = _pre_tool_deny(reason)
        if stop is not None:
            answer |= {"continue": False, "stopReason": stop}
        return answer

    def after(self, event: str, notes: list[str]) -> dict[str, Any]:
        return _context(event, notes)


class Codex(Agent):
    """Codex CLI: `PreToolUse`, `PostToolUse` (failures too), `PreModelRequest` per request.
    No hook answer ends its run: `continue: false` beside a deny cancels the deny. A patch made
    through the shell (`apply_patch <<EOF`) comes as `Bash` and gets no `PostToolUse`."""

    name = "codex"
    pre_events = frozenset({"PreToolUse"})
    post_events = frozenset({"PostToolUse"})
    model_events = frozenset({"PreModelRequest"})
    prompt_events = frozenset({"UserPromptSubmit"})
    end_events = frozenset({"SessionEnd"})
    tools = ({"name": "apply_patch", "effect": "write"},)
    shell_tools = frozenset({"Bash"})

    def deny(self, event: str, reason: str, stop: str | None) -> dict[str, Any]:
        return _pre_tool_deny(reason)

    def after(self, event: str, notes: list[str]) -> dict[str, Any]:
        return _context(event, notes)  # Codex adds it as a developer message


# Gemini CLI's shell result is `Output: <output>` then trailer lines, each only when it
# applies: `Error:`, `Exit Code:` (non-zero only), `Signal:`, `Background PIDs:`, and last the
# process group, new on every call. Only the trailer is the shell's: the output itself can hold
# any of these words (a CI log, a test printing "Exit Code: 0"). The whole is wrapped in
# `<untrusted_context>` lines, and the output cannot close that tag (Gemini CLI escapes it).
_GEMINI_SHELL = "run_shell_command"
# RE2 (linear; no lookahead, so the process group's line keeps its tail through a group).
_GEMINI_END = r"\s*(?:</untrusted_context>\s*)?\z"
_GEMINI_PGID = re2.compile(r"(?m)^Process Group PGID: \d+(" + _GEMINI_END + ")")
_GEMINI_EXIT = re2.compile(
    r"(?m)^Exit Code: (-?\d+)(?:\n|\z)"
    r"(?:(?:Signal|Background PIDs|Process Group PGID): .*(?:\n|\z))*" + _GEMINI_END
)


class Gemini(Agent):
    """Gemini CLI: `BeforeTool`, `AfterTool`, `BeforeModel` per request; `continue: false` ends."""

    name = "gemini"
    pre_events = frozenset({"BeforeTool"})
    post_events = frozenset({"AfterTool"})
    model_events = frozenset({"BeforeModel"})
    prompt_events = frozenset({"BeforeAgent"})
    end_events = frozenset({"SessionEnd"})
    tools = (
        *(
            {"name": n, "effect": "read"}
            for n in (
                "read_file",
                "read_many_files",
                "list_directory",
                "glob",
                "search_file_content",
                "grep_search",
            )
        ),
        *({"name": n, "effect": "write"} for n in ("write_file", "replace")),
    )
    shell_tools = frozenset({_GEMINI_SHELL})

    def result_view(self, payload: dict[str, Any]) -> Any:
        response = payload.get("tool_response")
        text = _shell_text(payload)
        if isinstance(response, dict) and text is not None:
            return {**response, "llmContent": _GEMINI_PGID.sub(r"\1", text)}
        return response

    def failed(self, payload: dict[str, Any]) -> bool:
        response = payload.get("tool_response")
        if not isinstance(response, dict):
            return False
        if response.get("error"):
            return True
        text = _shell_text(payload)
        exit_code = _GEMINI_EXIT.search(text) if text is not None else None
        return exit_code is not None and exit_code.group(1) != "0"

    def deny(self, event: str, reason: str, stop: str | None) -> dict[str, Any]:
        answer: dict[str, Any] = {"decision": "deny", "reason": reason}
        if stop is not None:
            answer |= {"continue": False, "stopReason": stop}
        return answer

    def after(self, event: str, notes: list[str]) -> dict[str, Any]:
        return _context(event, notes)


def _shell_text(payload: dict[str, Any]) -> str | None:
    """The text of a Gemini CLI shell result; None for every other tool's."""
    response = payload.get("tool_response")
    if payload.get("tool_name") != _GEMINI_SHELL or not isinstance(response, dict):
        return None
    text = response.get("llmContent")
    return text if isinstance(text, str) else None


AGENTS: dict[str, Agent] = {a.name: a for a in (Claude(), Codex(), Gemini())}


def _polls_a_background_task(tool: str, args: Any) -> bool:
    """A look at a background job's output: Claude Code writes it to `…/tasks/<id>.output` (in
    its temporary folder) and tells the model to poll it with Read; a shell command may read it
    too."""
    if not isinstance(args, dict):
        return False
    target = args.get("file_path") if tool == "Read" else args.get("command") if tool == "Bash" else None
    return isinstance(target, str) and _TASK_OUTPUT.search(target) is not None


_TASK_OUTPUT = re2.compile(r"/tasks/[\w-]+\.output\b")
