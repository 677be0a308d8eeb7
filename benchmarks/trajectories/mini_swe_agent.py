"""mini-swe-agent trajectories (`trajectory_format: mini-swe-agent-1`) as neutral runs."""

# A shell-only agent: each assistant message is one model step holding one ```bash block;
# the next user message is the observation, `<returncode>N</returncode>` then the output (in
# `<output>` tags, which the result leaves out; a long output keeps its head and tail tags). A
# step without exactly one block gets a format error instead and runs nothing (a round with no
# call); a command that timed out is an error; the last observation is the submitted diff.

from __future__ import annotations

import re
from typing import Any

from benchmarks.trajectories.runlog import DEFAULT_STEP_LIMIT, Call, Trajectory
from stallwatch.engine.shell import shell_effect

FRAMEWORK = "mini-swe-agent"
TOOLS = [{"name": "bash", "effect": "unknown"}]
# The agent's own action pattern (one fenced bash block).
_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"\A<returncode>(-?\d+)</returncode>\n?")
_TIMEOUT = "The last command <command>"
# The agent wraps what the command printed in `<output>` tags; the result is what it printed,
# so a silent command (`sed -i`, a heredoc into a file) has an empty result, as a runtime sees it.
_WRAPPED = re.compile(r"\A<output>\n?(.*)</output>\s*\Z", re.DOTALL)


def convert(traj: dict[str, Any], run_id: str, resolved: bool) -> Trajectory:
    """One mini-swe-agent trajectory; `resolved` comes from SWE-bench's report beside it."""
    agent = (traj.get("info") or {}).get("config", {}).get("agent", {})
    out = Trajectory(
        FRAMEWORK, run_id, resolved, TOOLS, step_limit=agent.get("step_limit") or DEFAULT_STEP_LIMIT
    )
    messages = traj["messages"]
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        actions = _ACTION.findall(_text(message))
        answer = messages[i + 1] if i + 1 < len(messages) and messages[i + 1]["role"] == "user" else None
        if len(actions) != 1 or answer is None:
            out.steps.append([])  # a format error (or a last step never answered): nothing ran
            continue
        command = actions[0].strip()
        out.steps.append([_call(command, _text(answer))])
    return out


def _call(command: str, observation: str) -> Call:
    match = _RETURNCODE.match(observation)
    if match:
        status = "ok" if match.group(1) == "0" else "error"
        output = observation[match.end() :]
        wrapped = _WRAPPED.match(output)
        if wrapped:
            output = wrapped.group(1)
    else:  # a timeout message, or the submitted diff that ends the run
        status = "error" if observation.startswith(_TIMEOUT) else "ok"
        output = observation
    return Call("bash", {"command": command}, status, output, shell_effect(command))


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # newer formats: a list of text parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
