"""`stallwatch hooks install|uninstall <agent>`: stallwatch's entries merged into (or taken out
of) a coding agent's own settings file, the user's other hooks and settings kept, idempotent,
with a backup of the file as it was."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stallwatch.hooks.command import DEFAULT_URL, TOKEN_ENV, URL_ENV

# Seconds an agent waits for one hook before running the call anyway: above the command's own
# deadline (8 s), so that the command, not the agent, decides when to fail open.
HOOK_TIMEOUT_S = 10


@dataclass(frozen=True)
class Target:
    agent: str
    events: tuple[str, ...]  # the events stallwatch needs
    tool_events: frozenset[str]  # those that take a tool matcher
    match_all: str  # the agent's matcher for every tool
    timeout: int  # in the agent's unit
    extra: dict[str, Any]  # settings the hooks need to run at all
    # Events whose timeout the agent caps lower (it warns about a larger one on every start).
    capped: dict[str, int] = field(default_factory=dict)
    # What the user must still do before the agent runs the hooks, said after installing.
    after_install: str = ""

    def path(self, scope: str, cwd: Path) -> Path:
        home = Path.home()
        if self.agent == "claude":
            return (home / ".claude" if scope == "user" else cwd / ".claude") / "settings.json"
        if self.agent == "codex":
            codex_home = Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else home / ".codex"
            return (codex_home if scope == "user" else cwd / ".codex") / "hooks.json"
        return (home / ".gemini" if scope == "user" else cwd / ".gemini") / "settings.json"


TARGETS = {
    "claude": Target(
        "claude",
        ("PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "SessionEnd"),
        frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"}),
        "*",
        HOOK_TIMEOUT_S,
        {},
    ),
    # Codex: an integer timeout (a float silently disables every hook in the file), at most 3 s
    # for SessionEnd; and no hook runs until the user has trusted it.
    "codex": Target(
        "codex",
        ("PreToolUse", "PostToolUse", "PreModelRequest", "UserPromptSubmit", "SessionEnd"),
        frozenset({"PreToolUse", "PostToolUse"}),
        "",
        HOOK_TIMEOUT_S,
        {},
        capped={"SessionEnd": 3},
        after_install="Codex runs new hooks only once trusted: accept them in the review "
        "`codex` shows at its next start (`codex exec` has "
        "--dangerously-bypass-hook-trust for automation)",
    ),
    # Gemini CLI: timeouts in milliseconds; hooks run only with hooksConfig.enabled.
    "gemini": Target(
        "gemini",
        ("BeforeTool", "AfterTool", "BeforeModel", "BeforeAgent", "SessionEnd"),
        frozenset({"BeforeTool", "AfterTool"}),
        ".*",
        HOOK_TIMEOUT_S * 1000,
        {"hooksConfig": {"enabled": True}},
    ),
}


def hook_command(agent: str) -> str:
    """The command an agent runs: this installation's `stallwatch`, found wherever it is (a
    venv not activated has it beside its python, off PATH)."""
    found = shutil.which("stallwatch")
    beside = Path(sys.executable).with_name("stallwatch")
    if found is None and os.access(beside, os.X_OK):
        found = str(beside)
    if found:
        return f"{shlex.quote(found)} hook {agent}"
    return f"{shlex.quote(sys.executable)} -m stallwatch.cli.main hook {agent}"


def is_ours(hook: Any, agent: str) -> bool:
    if not isinstance(hook, dict):
        return False
    command, url = str(hook.get("command", "")), str(hook.get("url", ""))
    return (command.endswith(f" hook {agent}") and "stallwatch" in command) or url.rstrip("/").endswith(
        f"/hooks/{agent}"
    )


def without_ours(settings: dict[str, Any], agent: str) -> dict[str, Any]:
    """The settings with every stallwatch entry for `agent` taken out, empty groups dropped."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return dict(settings)
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        new_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                entries = [h for h in group["hooks"] if not is_ours(h, agent)]
                if not entries:
                    continue
                group = {**group, "hooks": entries}
            new_groups.append(group)
        if new_groups:
            kept[event] = new_groups
    result = {**settings, "hooks": kept}
    if not kept:
        del result["hooks"]
    return result


def with_ours(settings: dict[str, Any], target: Target, entry: dict[str, Any]) -> dict[str, Any]:
    result = dict(without_ours(settings, target.agent))  # never the caller's dict
    hooks = dict(result.get("hooks") or {})
    for event in target.events:
        timeout = min(entry["timeout"], target.capped.get(event, entry["timeout"]))
        group: dict[str, Any] = {"hooks": [{**entry, "timeout": timeout}]}
        if event in target.tool_events:
            group = {"matcher": target.match_all, **group}
        hooks[event] = [*hooks.get(event, []), group]
    result["hooks"] = hooks
    for key, value in target.extra.items():
        current = result.get(key)
        result[key] = {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value
    return result


def entry_for(target: Target, http: bool, url: str) -> dict[str, Any]:
    if http:
        if target.agent != "claude":
            raise ValueError(f"--http: only Claude Code takes http hooks; {target.agent} runs the command")
        entry: dict[str, Any] = {
            "type": "http",
            "url": f"{url.rstrip('/')}/hooks/claude",
            "timeout": target.timeout,
        }
        if os.environ.get(TOKEN_ENV):
            # Claude Code fills the header from its own environment when it sends the hook: the
            # token is never written to the settings file.
            entry |= {"headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}, "allowedEnvVars": [TOKEN_ENV]}
        return entry
    command = hook_command(target.agent)
    if url != DEFAULT_URL:
        command = f"{URL_ENV}={shlex.quote(url)} {command}"
    return {"type": "command", "command": command, "timeout": target.timeout}


def read_settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        settings = json.loads(path.read_text() or "{}")
    except ValueError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc}): fix it or move it away, then run again"
        ) from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path} holds no JSON object: fix it or move it away, then run again")
    return settings


def write_settings(path: Path, settings: dict[str, Any]) -> Path | None:
    """Write the file, first copying what was there to `<name>.stallwatch-backup`. A symlink is
    written through to its target (dotfiles kept in a repository stay links), and the file keeps
    its mode: an agent's settings can hold API keys (Claude Code's `env`), so a file that was
    0600 stays 0600 whatever the umask, and a new one is made 0600."""
    target = path.resolve() if path.is_symlink() else path
    target.parent.mkdir(parents=True, exist_ok=True)
    backup, mode = None, 0o600
    if target.exists():
        backup = path.with_name(path.name + ".stallwatch-backup")
        shutil.copy2(target, backup)  # its mode too
        mode = stat.S_IMODE(target.stat().st_mode)
    tmp = target.with_name(target.name + ".stallwatch-tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # one left by a crash may have any mode: O_CREAT would keep it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(settings, indent=2) + "\n")
        os.fchmod(f.fileno(), mode)
    os.replace(tmp, target)  # an agent starting meanwhile reads the old file or the new, whole
    return backup


def change(action: str, agent: str, scope: str, http: bool, url: str | None, cwd: Path) -> str:
    target = TARGETS[agent]
    path = target.path(scope, cwd)
    settings = read_settings(path)
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    new = (
        with_ours(settings, target, entry_for(target, http, url))
        if action == "install"
        else without_ours(settings, agent)
    )
    if new == settings:
        return f"{path}: already {'installed' if action == 'install' else 'without stallwatch'}"
    backup = write_settings(path, new)
    done = "installed in" if action == "install" else "removed from"
    said = f"stallwatch hooks {done} {path}" + (f" (the previous file is {backup})" if backup else "")
    if action == "install" and target.after_install:
        said += f"\n{target.after_install}"
    return said


def main(action: str, agent: str, scope: str, http: bool, url: str | None) -> int:
    try:
        print(change(action, agent, scope, http, url, Path.cwd()))
    except ValueError as exc:
        print(f"stallwatch hooks: {exc}", file=sys.stderr)
        return 2
    return 0
