"""Gemini CLI itself (from npm, run offline against a scripted Gemini API) guarded through its
hooks by a real `stallwatch serve`: it loops on one grep (refused, then ended by the stop),
re-runs a failing test after each write (never refused; the same failure, its process group new
each time, is one result: the nudge reaches the model), re-reads a file after writing it."""

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
from tests.serve.agents.gemini_fake import FakeGemini, Reply, Script
from tests.serve.agents.harness import STALLWATCH, RecordingService, install, site

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("npm") is None,
        reason="npm is not installed: Gemini CLI comes from npm (deploy/agents/install.sh)",
    ),
]

BLOCKED = "Tool execution blocked: "


@pytest.fixture(scope="module")
def gemini_exe() -> str:
    return install("gemini")


# Offline: an API key, no telemetry or update checks, folder trust off (hooks load only in a
# trusted folder), and Gemini CLI's own loop detection off (it would end the run at the 5th
# identical call, before any hook sees it).
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "model": {"disableLoopDetection": True},
}


async def run_gemini(
    exe: str,
    tmp: Path,
    script: Script,
    files: dict[str, str],
) -> tuple[FakeGemini, RecordingService, list[dict]]:
    home, ws = tmp / "home", tmp / "ws"
    (home / ".gemini").mkdir(parents=True)
    ws.mkdir()
    for name, text in files.items():
        (ws / name).write_text(text)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    model = FakeGemini(script)
    service = RecordingService()
    async with (
        site(model.app()) as model_url,
        site(make_app(service, None, HookSettings())) as stallwatch_url,
    ):
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "GOOGLE_GEMINI_BASE_URL": model_url,
            "GEMINI_API_KEY": "fake",
            "GEMINI_TELEMETRY_ENABLED": "false",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "TMPDIR": str(tmp),
        }
        subprocess.run(
            [STALLWATCH, "hooks", "install", "gemini", "--url", stallwatch_url],
            check=True,
            env=env,
            capture_output=True,
        )
        proc = await asyncio.create_subprocess_exec(
            exe,
            "-p",
            "Fix the repository.",
            "--approval-mode",
            "yolo",
            "--output-format",
            "stream-json",
            cwd=ws,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert model.seen, f"the model was never called: {err.decode()[-2000:]}"
    assert not model.unknown, f"Gemini CLI asked for more than the fake serves: {model.unknown}"
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    return model, service, lines


def grep_forever(turn: int, results: list[dict]) -> Reply:
    if turn >= 12:
        return "Final answer: gave up."
    return ["grep -rn foo ."]


async def test_gemini_looping_on_one_grep_is_refused_then_ended_in_stallwatchs_words(gemini_exe, tmp_path):
    model, service, lines = await run_gemini(
        gemini_exe, tmp_path, grep_forever, {"notes.txt": "foo is here\n"}
    )
    received = [json.loads(r["text"]) for seen in model.seen for r in seen.tool_results]
    assert "./notes.txt:1:foo is here" in received[0]["output"]
    assert all(r.get("error", "").startswith(BLOCKED + "Refused: this exact call") for r in received[1:])
    run = service.only_run()
    assert run.stop is not None and run.round == 6  # one round per model request, until the stop
    # `continue: false` ends the run: the model is not asked again, the output says why.
    assert len(model.seen) == 7, received
    stopped = [
        line
        for line in lines
        if line.get("type") == "tool_result"
        and line.get("status") == "error"
        and run.stop.reason in line.get("output", "")
    ]
    assert len(stopped) == 1 and lines[-1]["type"] == "result", lines[-3:]


def write_and_test(turn: int, results: list[dict]) -> Reply:
    """Read a.py, then four times: write it, run the (still failing) test, re-read the file."""
    if turn == 0:
        return [("read_file", {"file_path": "a.py"})]
    cycle, step = divmod(turn - 1, 3)
    if cycle >= 4:
        return "Final answer: the test still fails."
    return [
        [("write_file", {"file_path": "a.py", "content": f"VALUE = {cycle + 1}\n"})],
        ["python3 test_a.py"],
        [("read_file", {"file_path": "a.py"})],
    ][step]


async def test_gemini_re_running_a_test_after_each_write_is_never_refused(gemini_exe, tmp_path):
    files = {"a.py": "VALUE = 0\n", "test_a.py": "from a import VALUE\nassert VALUE == 99, 'not yet'\n"}
    model, service, _ = await run_gemini(gemini_exe, tmp_path, write_and_test, files)
    received = [json.loads(r["text"]) for seen in model.seen for r in seen.tool_results]
    assert len(model.seen) == 14 and not [r for r in received if "error" in r], received
    assert (tmp_path / "ws" / "a.py").read_text() == "VALUE = 4\n"
    assert [r["output"] for r in received if r["output"].startswith("VALUE")] == [
        f"VALUE = {i}\n" for i in range(5)
    ]  # each re-read after a write ran
    tests = [r["output"] for r in received if "not yet" in r["output"]]
    pgids = {re.search(r"Process Group PGID: (\d+)", t).group(1) for t in tests}
    assert len(tests) == 4 and len(pgids) == 4  # the same failure, each in a new process group
    run = service.only_run()
    assert run.stop is None
    assert run.nudges, "the same failing output after each write is a stall: one nudge"
    nudge = json.dumps("[stallwatch] " + run.nudges[0].reason)[1:-1]
    assert any(nudge in seen.request_text for seen in model.seen), "the nudge never reached the model"
