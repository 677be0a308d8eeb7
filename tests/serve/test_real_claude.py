"""Claude Code itself (from npm, run offline against a scripted model) guarded through its hooks
by a real `stallwatch serve`: it loops on one grep (stopped), re-runs a failing test after each
edit (never refused, not stopped), re-reads a file after writing it (not refused)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stallwatch.serve.app import make_app
from stallwatch.serve.hooks import HookSettings
from tests.serve.agents.anthropic_fake import FakeAnthropic, Reply
from tests.serve.agents.harness import STALLWATCH, RecordingService, install, site

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("npm") is None,
        reason="npm is not installed: Claude Code comes from npm (deploy/agents/install.sh)",
    ),
]


@pytest.fixture(scope="module")
def claude_exe() -> str:
    return install("claude")


async def run_claude(
    exe: str, tmp: Path, script, files: dict[str, str], http_hooks: bool = True, token: str | None = None
) -> tuple[FakeAnthropic, RecordingService, list[dict]]:
    home, ws = tmp / "home", tmp / "ws"
    home.mkdir()
    ws.mkdir()
    for name, text in files.items():
        (ws / name).write_text(text)
    (home / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True, "projects": {str(ws): {"hasTrustDialogAccepted": True}}})
    )
    model = FakeAnthropic(script)
    service = RecordingService()
    async with (
        site(model.app()) as model_url,
        site(make_app(service, token, HookSettings())) as stallwatch_url,
    ):
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "sk-fake",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "STALLWATCH_SERVE_URL": stallwatch_url,
            "TMPDIR": str(tmp),
            **({"STALLWATCH_SERVE_TOKEN": token} if token else {}),
        }
        install = ["hooks", "install", "claude", "--url", stallwatch_url] + (["--http"] if http_hooks else [])
        subprocess.run([STALLWATCH, *install], check=True, env=env, capture_output=True)
        proc = await asyncio.create_subprocess_exec(
            exe,
            "-p",
            "Fix the repository.",
            "--output-format",
            "stream-json",
            "--verbose",
            "--allowedTools",
            "Bash",
            "Read",
            "Edit",
            "Write",
            cwd=ws,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert model.seen, f"the model was never called: {err.decode()[-2000:]}"
    return model, service, lines


def grep_forever(turn: int, results: list[dict]) -> Reply:
    if turn >= 15:
        return "Final answer: gave up."
    return [("Bash", {"command": "grep -n foo notes.txt", "description": f"look for foo ({turn})"})]


async def test_claude_code_looping_on_one_grep_is_stopped_in_stallwatchs_words(claude_exe, tmp_path):
    """Through http hooks to a server that wants a token: Claude Code sends it from its env."""
    model, service, lines = await run_claude(
        claude_exe, tmp_path, grep_forever, {"notes.txt": "foo is here\n"}, token="s3cret-" + "x" * 24
    )
    settings = (tmp_path / "home" / ".claude" / "settings.json").read_text()
    assert "s3cret" not in settings, "the token itself was written to the settings file"
    received = [r for seen in model.seen for r in seen.tool_results]
    assert received[0]["text"].strip() == "1:foo is here" and not received[0]["is_error"]
    refusals = [r for r in received if r["is_error"] and "Refused: this exact call" in r["text"]]
    assert refusals, received
    assert len(model.seen) < 15, "the loop was never stopped"
    run = service.only_run()
    assert run.stop is not None, received
    said = [r for r in received if run.stop.reason in r["text"]] + [
        line for line in lines if run.stop.reason in json.dumps(line)
    ]
    assert said, "the stop's words reached neither the model nor the output"


def edit_and_test(turn: int, results: list[dict]) -> Reply:
    """Read a.py, then six times: edit it, run the (still failing) test, re-read the file."""
    if turn == 0:
        return [("Read", {"file_path": "a.py"})]
    cycle, step = divmod(turn - 1, 3)
    if cycle >= 6:
        return "Final answer: the test still fails."
    if step == 0:
        return [
            (
                "Edit",
                {"file_path": "a.py", "old_string": f"VALUE = {cycle}", "new_string": f"VALUE = {cycle + 1}"},
            )
        ]
    if step == 1:
        return [("Bash", {"command": "python3 test_a.py", "description": "run the test"})]
    return [("Read", {"file_path": "a.py"})]


async def test_claude_code_re_running_a_test_after_each_edit_is_never_refused(claude_exe, tmp_path):
    files = {"a.py": "VALUE = 0\n", "test_a.py": "from a import VALUE\nassert VALUE == 99, 'not yet'\n"}
    model, service, _ = await run_claude(claude_exe, tmp_path, edit_and_test, files, http_hooks=False)
    received = [r for seen in model.seen for r in seen.tool_results]
    assert len(model.seen) == 20, [r["text"][:80] for r in received]
    assert not [r for r in received if "hook error" in r["text"] or "Refused" in r["text"]], received
    assert (tmp_path / "ws" / "a.py").read_text() == "VALUE = 6\n"
    tests = [r for r in received if "not yet" in r["text"]]
    assert len(tests) == 6
    run = service.only_run()
    assert run.stop is None
    assert run.nudges, "the same failing output after each edit is a stall: one nudge"
    nudge = json.dumps("[stallwatch] " + run.nudges[0].reason)[1:-1]
    assert any(nudge in seen.request_text for seen in model.seen), "the nudge never reached the model"


def poll_a_background_job(turn: int, results: list[dict]) -> Reply:
    """Start a slow job in the background, then poll its output with Read, as Claude Code tells
    the model to, until it has finished: the same Read again and again, the same empty answer."""
    if turn == 0:
        return [
            (
                "Bash",
                {
                    "command": "sleep 4; echo job-finished",
                    "run_in_background": True,
                    "description": "a slow job",
                },
            )
        ]
    if turn >= 40 or any("job-finished" in r["text"] for r in results):
        return "Final answer: the job finished."
    announced = (
        re.search(r"Output is being written to: (\S+\.output)", results[0]["text"]) if turn == 1 else None
    )
    if announced:
        poll_a_background_job.path = announced.group(1)  # type: ignore[attr-defined]
    return [("Read", {"file_path": poll_a_background_job.path})]  # type: ignore[attr-defined]


async def test_claude_code_polling_a_background_job_is_never_refused(claude_exe, tmp_path):
    model, service, _ = await run_claude(claude_exe, tmp_path, poll_a_background_job, {})
    received = [r for seen in model.seen for r in seen.tool_results]
    assert "running in background" in received[0]["text"], received[0]
    polls = received[1:]
    empty = [r for r in polls if "job-finished" not in r["text"]]
    assert len(empty) >= 6, "the job finished before five stale rounds: make it slower"
    assert not [r for r in polls if "Refused" in r["text"] or "hook error" in r["text"]], polls
    assert any("job-finished" in r["text"] for r in polls), "the job's output was never read"
    # The job's end reaches Claude Code as a new prompt of the session: a second run, also unstopped.
    runs = {**service.runs, **{r: h.run for r, h in service.held.items()}}
    assert runs and all(run.stop is None for run in runs.values()), [
        (run.stop.code, run.stop.reason) for run in runs.values() if run.stop
    ]
