"""Codex CLI itself (from npm, run offline against a scripted Responses API) guarded through its
hooks by a real `stallwatch serve`: it loops on one grep (refused, then stopped: every call
denied, since no hook answer ends a Codex run), re-runs a failing test after each patch (never
refused; the nudge reaches the model), re-reads a file after patching it (not refused)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stallwatch.serve.app import make_app
from stallwatch.serve.hooks import HookSettings
from tests.serve.agents.harness import STALLWATCH, RecordingService, install, site
from tests.serve.agents.openai_fake import FakeOpenAI, Script

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("npm") is None,
        reason="npm is not installed: Codex comes from npm (deploy/agents/install.sh)",
    ),
]

GREP_OUTPUT = "./notes.txt:1:foo is here"
BLOCKED = "Command blocked by PreToolUse hook: "


@pytest.fixture(scope="module")
def codex_exe() -> str:
    return install("codex")


def config_toml(model_url: str, ws: Path) -> str:
    """A provider at the fake, and every feature that reaches the network at start-up off (with
    plugins on, Codex runs `git ls-remote` against github before the first request)."""
    features = "\n".join(
        f"{f} = false"
        for f in ("plugins", "remote_plugin", "plugin_sharing", "apps", "in_app_updates", "daemon_auto_start")
    )
    return f"""model = "gpt-fake"
model_provider = "fake"
approval_policy = "never"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{model_url}/v1"
env_key = "FAKE_OPENAI_KEY"
wire_api = "responses"

[features]
{features}

[analytics]
enabled = false

[projects."{ws}"]
trust_level = "trusted"
"""


async def run_codex(
    exe: str,
    tmp: Path,
    script: Script,
    files: dict[str, str],
) -> tuple[FakeOpenAI, RecordingService, str]:
    home, ws = tmp / "home", tmp / "ws"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    ws.mkdir()
    for name, text in files.items():
        (ws / name).write_text(text)
    model = FakeOpenAI(script)
    service = RecordingService()
    async with (
        site(model.app()) as model_url,
        site(make_app(service, None, HookSettings())) as stallwatch_url,
    ):
        (codex_home / "config.toml").write_text(config_toml(model_url, ws))
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "CODEX_HOME": str(codex_home),
            "FAKE_OPENAI_KEY": "sk-fake",
            "TMPDIR": str(tmp),
        }
        subprocess.run(
            [STALLWATCH, "hooks", "install", "codex", "--url", stallwatch_url],
            check=True,
            env=env,
            capture_output=True,
        )
        proc = await asyncio.create_subprocess_exec(
            exe,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-hook-trust",
            "-C",
            str(ws),
            "Fix the repository.",
            cwd=ws,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert model.seen, f"the model was never called: {err.decode()[-2000:]}"
    assert "hook timeout" not in out.decode(), "Codex warned about the installed hooks"
    return model, service, out.decode()


def grep_forever(turn: int, results: list[dict]) -> list[str] | str:
    if turn >= 12:
        return "Final answer: gave up."
    return ["grep -rn foo ."]


async def test_codex_looping_on_one_grep_is_refused_then_denied_in_stallwatchs_words(codex_exe, tmp_path):
    model, service, _ = await run_codex(codex_exe, tmp_path, grep_forever, {"notes.txt": "foo is here\n"})
    received = [r["text"] for seen in model.seen for r in seen.tool_results]
    assert GREP_OUTPUT in received[0] and BLOCKED not in received[0]
    assert all(text.startswith(BLOCKED) for text in received[1:]), received  # the grep never ran again
    assert "Refused: this exact call" in received[1]
    run = service.only_run()
    assert run.stop is not None and run.round == 6  # one round per model request, until the stop
    after_stop = [text for text in received if run.stop.reason in text]
    # Codex cannot be ended from a hook: it asks the model again, and every call is denied.
    assert len(model.seen) == 13 and len(after_stop) == len(received) - 6, received


def patch(old: str, new: str) -> str:
    """A patch through the shell, as Codex's models write one."""
    return (
        f"apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n@@\n-{old}\n+{new}\n"
        "*** End Patch\nEOF\n"
    )


def patch_and_test(turn: int, results: list[dict]) -> list[str] | str:
    """Read a.py, then four times: patch it, run the (still failing) test, re-read the file."""
    if turn == 0:
        return ["cat a.py"]
    cycle, step = divmod(turn - 1, 3)
    if cycle >= 4:
        return "Final answer: the test still fails."
    return [[patch(f"VALUE = {cycle}", f"VALUE = {cycle + 1}")], ["python3 test_a.py"], ["cat a.py"]][step]


async def test_codex_re_running_a_test_after_each_patch_is_never_refused(codex_exe, tmp_path):
    files = {"a.py": "VALUE = 0\n", "test_a.py": "from a import VALUE\nassert VALUE == 99, 'not yet'\n"}
    model, service, _ = await run_codex(codex_exe, tmp_path, patch_and_test, files)
    received = [r["text"] for seen in model.seen for r in seen.tool_results]
    assert len(model.seen) == 14 and not [t for t in received if BLOCKED in t], received
    assert (tmp_path / "ws" / "a.py").read_text() == "VALUE = 4\n"
    assert len([t for t in received if "not yet" in t]) == 4
    assert [t.split("Output:\n")[-1] for t in received if "Output:\nVALUE =" in t] == [
        f"VALUE = {i}\n" for i in range(5)
    ]  # each re-read after a patch ran
    run = service.only_run()
    assert run.stop is None
    assert run.nudges, "the same failing output after each patch is a stall: one nudge"
    nudge = json.dumps("[stallwatch] " + run.nudges[0].reason)[1:-1]
    assert any(nudge in seen.request_text for seen in model.seen), "the nudge never reached the model"
