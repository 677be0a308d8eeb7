"""Small trajectories written for the tests, in the two recorded formats the converters read."""

# They are authored here (not copied from the public sample, which stays out of the repository)
# and shaped like what the sample shows: an edit, test, re-read cycle that ends
# resolved; an editor call missing a required parameter, repeated with the same error; a
# reproduction script printing the same error after each of several edits.

from __future__ import annotations

import json
from typing import Any

_TRACEBACK = 'Traceback (most recent call last):\n  File "reproduce.py", line 3, in <module>\n'
_DIFF = "diff --git a/src/parser.py b/src/parser.py\n-    return int(x)\n+    return int(x.strip())\n"


def mini_run(steps: list[tuple[str | None, int, str]]) -> dict[str, Any]:
    """A mini-swe-agent-1 trajectory: (command, returncode, output) per step; a None command
    is a step the model wrote without a bash block (answered by a format error)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can use a shell."},
        {"role": "user", "content": "<pr_description>Fix parse()</pr_description>"},
    ]
    for command, code, output in steps:
        if command is None:
            messages += [
                {"role": "assistant", "content": "THOUGHT: I will think first."},
                {"role": "user", "content": "Please always provide EXACTLY ONE action."},
            ]
            continue
        messages += [
            {"role": "assistant", "content": f"THOUGHT: next.\n\n```bash\n{command}\n```"},
            {"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n{output}</output>"},
        ]
    return {
        "trajectory_format": "mini-swe-agent-1",
        "messages": messages,
        "info": {"exit_status": "Submitted", "config": {"agent": {"step_limit": 250}}},
    }


def openhands_run(steps: list[tuple[str, dict[str, Any], str]], resolved: bool) -> dict[str, Any]:
    """An OpenHands record (SWE-Gym sampled shape): (tool, arguments, observation) per step."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are OpenHands."},
        {"role": "user", "content": "Fix parse()."},
    ]
    for i, (tool, args, observation) in enumerate(steps):
        call_id = f"call_{i}"
        messages += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps(args)},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": tool,
                "content": f"OBSERVATION:\n{observation}",
            },
        ]
    return {
        "instance_id": "authored__parser-1",
        "run_id": "authored",
        "resolved": resolved,
        "tools": [{"function": {"name": n}} for n in ("execute_bash", "str_replace_editor", "finish")],
        "messages": messages,
    }


# Resolved: reproduce, edit, re-run, re-read the edited file, edit again, tests pass, re-run
# the tests (only the duration differs), look at the diff twice, submit.
RESOLVED_EDIT_CYCLE = mini_run(
    [
        ("grep -rn 'def parse' src/", 0, "src/parser.py:10:def parse(x):\n"),
        ("cat src/parser.py", 0, "def parse(x):\n    return int(x)\n"),
        ("cat <<'EOF' > reproduce.py\nfrom src.parser import parse\nprint(parse(' 1'))\nEOF", 0, ""),
        ("python reproduce.py", 1, _TRACEBACK + "ValueError: invalid literal for int(): ' 1'\n"),
        ("sed -i 's/int(x)/int(x.strip)/' src/parser.py", 0, ""),
        ("python reproduce.py", 1, _TRACEBACK + "TypeError: int() argument must be a string\n"),
        ("cat src/parser.py", 0, "def parse(x):\n    return int(x.strip)\n"),
        ("sed -i 's/x.strip)/x.strip())/' src/parser.py", 0, ""),
        ("python reproduce.py", 0, "1\n"),
        ("python -m pytest tests/test_parser.py -q", 0, "...\n3 passed in 0.05s\n"),
        ("git diff", 0, _DIFF),
        ("python -m pytest tests/test_parser.py -q", 0, "...\n3 passed in 0.04s\n"),
        ("git diff", 0, _DIFF),
        ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached", 0, _DIFF),
    ]
)

_MISSING = "ERROR:\nParameter `new_str` is required for command: str_replace."
# Unresolved: after two looks, the same edit without `new_str` twelve times, the same error
# each time (the sample's one real loop, shortened); the loop starts in round 3.
EDITOR_LOOP = openhands_run(
    [
        (
            "execute_bash",
            {"command": "ls /workspace/repo/src"},
            "parser.py\n[Command finished with exit code 0]",
        ),
        (
            "str_replace_editor",
            {"command": "view", "path": "/workspace/repo/src/parser.py"},
            "     1\tdef parse(x):\n     2\t    return int(x)\n",
        ),
    ]
    + [
        (
            "str_replace_editor",
            {"command": "str_replace", "path": "/workspace/repo/src/parser.py", "old_str": "return int(x)"},
            _MISSING,
        )
    ]
    * 12
    + [("finish", {}, "")],
    resolved=False,
)
EDITOR_LOOP_START = 3

# A stall: four different edits, and after each the reproduction script prints the same error.
STALL = mini_run(
    [("cat src/parser.py", 0, "def parse(x):\n    return int(x)\n")]
    + [
        step
        for n in range(4)
        for step in (
            (f"sed -i 's/int(x)/int(x{n})/' src/parser.py", 0, ""),
            ("python reproduce.py", 1, _TRACEBACK + "ValueError: invalid literal for int(): ' 1'\n"),
        )
    ]
    + [(None, 0, "")]
)
