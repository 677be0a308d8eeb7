"""`stallwatch hooks install|uninstall`: merged into the agent's settings, idempotent, backed up."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stallwatch.hooks.install import change

USER_HOOK = {"matcher": "Bash", "hooks": [{"type": "command", "command": "my-audit.sh"}]}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("STALLWATCH_SERVE_URL", raising=False)
    monkeypatch.delenv("STALLWATCH_SERVE_TOKEN", raising=False)
    return tmp_path


def test_claude_install_keeps_the_users_hooks_and_settings_and_backs_up(home):
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    before = {"model": "opus", "hooks": {"PreToolUse": [USER_HOOK]}}
    path.write_text(json.dumps(before))
    change("install", "claude", "user", False, None, home)
    settings = json.loads(path.read_text())
    assert settings["model"] == "opus"
    pre = settings["hooks"]["PreToolUse"]
    assert pre[0] == USER_HOOK and pre[1]["matcher"] == "*"
    assert pre[1]["hooks"][0]["command"].endswith("hook claude")
    assert set(settings["hooks"]) >= {"PostToolUse", "PostToolUseFailure", "SessionEnd"}
    assert json.loads((path.parent / "settings.json.stallwatch-backup").read_text()) == before

    once = path.read_text()
    assert "already installed" in change("install", "claude", "user", False, None, home)
    assert path.read_text() == once

    change("uninstall", "claude", "user", False, None, home)
    assert json.loads(path.read_text()) == before


def test_claude_http_hooks_point_at_the_server(home):
    change("install", "claude", "project", True, "http://127.0.0.1:9999", home)
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    entry = settings["hooks"]["PreToolUse"][0]["hooks"][0]
    assert entry == {"type": "http", "url": "http://127.0.0.1:9999/hooks/claude", "timeout": 10}


def test_claude_http_hooks_send_the_token_from_claude_codes_environment(home, monkeypatch):
    monkeypatch.setenv("STALLWATCH_SERVE_TOKEN", "a-long-secret")
    change("install", "claude", "user", True, "http://127.0.0.1:9999", home)
    text = (home / ".claude" / "settings.json").read_text()
    entry = json.loads(text)["hooks"]["PreToolUse"][0]["hooks"][0]
    assert entry["headers"] == {"Authorization": "Bearer ${STALLWATCH_SERVE_TOKEN}"}
    assert entry["allowedEnvVars"] == ["STALLWATCH_SERVE_TOKEN"] and "a-long-secret" not in text


def test_codex_gets_integer_timeouts_and_gemini_milliseconds_and_enabled_hooks(home, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(home / "codex-home"))
    change("install", "codex", "user", False, None, home)
    codex = json.loads((home / "codex-home" / "hooks.json").read_text())
    assert type(codex["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"]) is int
    assert codex["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"] == 3  # Codex caps it there
    assert "PreModelRequest" in codex["hooks"]
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps({"hooksConfig": {"notifications": True}}))
    change("install", "gemini", "user", False, None, home)
    gemini = json.loads((home / ".gemini" / "settings.json").read_text())
    assert gemini["hooksConfig"] == {"notifications": True, "enabled": True}
    assert gemini["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"] == 10000
    with pytest.raises(ValueError, match="only Claude Code"):
        change("install", "gemini", "user", True, None, home)


def test_a_broken_settings_file_is_named_and_left_alone(home):
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{not json")
    out = subprocess.run(
        [str(Path(sys.executable).with_name("stallwatch")), "hooks", "install", "claude"],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "PATH": ""},
    )
    assert out.returncode == 2 and str(path) in out.stderr and out.stderr.count("\n") == 1
    assert path.read_text() == "{not json"


def test_install_names_the_stallwatch_beside_python_when_it_is_off_path_and_says_codex_needs_trust(home):
    out = subprocess.run(
        [str(Path(sys.executable).with_name("stallwatch")), "hooks", "install", "codex"],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "PATH": "", "CODEX_HOME": str(home / "ch")},
    )
    assert out.returncode == 0 and "trusted" in out.stdout and "--dangerously-bypass-hook-trust" in out.stdout
    codex = json.loads((home / "ch" / "hooks.json").read_text())
    command = codex["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert command == f"{Path(sys.executable).with_name('stallwatch')} hook codex"


def test_install_keeps_a_private_settings_files_mode(home):
    """~/.claude/settings.json can hold API keys in `env`: it must not become world-readable."""
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"env": {"ANTHROPIC_API_KEY": "sk-secret"}}))
    path.chmod(0o600)
    old_umask = os.umask(0o022)
    try:
        change("install", "claude", "user", False, None, home)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((path.parent / "settings.json.stallwatch-backup").stat().st_mode) == 0o600
    path.chmod(0o640)
    change("uninstall", "claude", "user", False, None, home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_install_writes_through_a_symlinked_settings_file_to_its_target(home):
    """Dotfiles kept in a repository are symlinks: the link stays, the file it points at changes."""
    dotfiles = home / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text(json.dumps({"model": "opus"}))
    link = home / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    change("install", "claude", "user", False, None, home)
    assert link.is_symlink() and link.resolve() == real
    settings = json.loads(real.read_text())
    assert settings["model"] == "opus" and "PreToolUse" in settings["hooks"]
    assert not list(link.parent.glob("*.stallwatch-tmp")) and not list(dotfiles.glob("*.stallwatch-tmp"))
