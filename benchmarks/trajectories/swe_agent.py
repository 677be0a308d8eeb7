"""SWE-agent `.traj` files (the 2024 agent-computer interface) as neutral runs."""

# Each `trajectory` entry is one model step with one action: one of SWE-agent's own commands
# (`open`, `goto`, `scroll_down`, `edit 10:12 ... end_of_edit`, `create`, `search_dir`,
# `find_file`, `submit`, ...) or any shell command, run in one shell session for the whole run.
# The call's tool is the command's name (`bash` for a shell command) and its argument the
# action text. Entries the framework wrote itself (`exit_cost`, `exit_format`, ...: the run
# ended on a limit) are not model steps and are left out.
#
# Effects: `search_dir`, `find_file` and `search_file` with a file read; `create` and `edit`
# write; `open`, `goto` and `scroll_*` move the editor's window (what later edits and scrolls
# act on), so they are `unknown`, as is `submit`; a shell command follows `shell_effect`
# for a persistent shell. SWE-agent records no exit codes: status is `error` when the
# observation carries one of the error texts in _ERROR (command not found, a shell syntax error,
# a missing file, a usage line, an edit rejected for its syntax, a compiler or runtime error).

from __future__ import annotations

import re
import shlex
from typing import Any

from benchmarks.trajectories.runlog import Call, Effect, Trajectory
from stallwatch.engine.shell import shell_effect

FRAMEWORK = "swe-agent-2024"
_READS = frozenset({"search_dir", "find_file"})
_WRITES = frozenset({"create", "edit"})
_MOVES = frozenset({"open", "goto", "scroll_up", "scroll_down", "submit"})
_COMMANDS = _READS | _WRITES | _MOVES | {"search_file"}
_ERROR = re.compile(
    r"command not found|syntax error near unexpected token|No such file or directory|^Usage: "
    r"|Your proposed edit has introduced new syntax error|Traceback \(most recent call last\)"
    r"|^Error\b|: error:|^Exception in thread",
    re.MULTILINE,
)
_FRAMEWORK_EXITS = re.compile(r"\Aexit_\w+\Z")


def convert(traj: dict[str, Any], run_id: str, resolved: bool) -> Trajectory:
    """One SWE-agent trajectory; `resolved` comes from the evaluation's results beside it."""
    out = Trajectory(
        FRAMEWORK,
        run_id,
        resolved,
        [{"name": name, "effect": "unknown"} for name in (*sorted(_COMMANDS), "bash")],
    )
    for entry in traj["trajectory"]:
        action = (entry.get("action") or "").strip()
        if _FRAMEWORK_EXITS.match(action):
            continue
        if not action:
            out.steps.append([])  # the model wrote no action
            continue
        name = action.split(maxsplit=1)[0]
        tool = name if name in _COMMANDS else "bash"
        output = entry.get("observation") or ""
        status = "error" if _ERROR.search(output) else "ok"
        out.steps.append([Call(tool, {"command": action}, status, output, _effect(tool, action))])
    return out


def _effect(tool: str, action: str) -> Effect:
    if tool in _READS or (tool == "search_file" and _word_count(action) >= 3):
        return "read"  # search_file without a file searches the open one: window state
    if tool in _WRITES:
        return "write"
    if tool == "bash":
        return shell_effect(action, persistent=True)
    return "unknown"


def _word_count(action: str) -> int:
    try:
        return len(shlex.split(action))
    except ValueError:
        return 0
