"""`stallwatch serve --kafka` as a process, judging through a real broker and a real worker: the
same hook sessions (Codex and Gemini CLI payloads) get the same answers as from the engine
in-process: the same refusals and stops at the same calls, the same nudges."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from tests.kafka_harness import StallwatchProcess, free_port, serving_worker
from tests.serve.conftest import running_server
from tests.waiting import until

pytestmark = pytest.mark.kafka

Post = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
GREP = {"command": "grep -rn foo ."}
TEST = {"command": "python3 test_a.py"}
FAILING = "Traceback (most recent call last):\nAssertionError: not yet\n"


async def codex_session(post: Post, session: str) -> list[dict[str, Any]]:
    """Read, then three times: patch, run the failing test, re-read; then one grep, over and over."""
    answers, ids = [], iter(range(1000))

    async def call(tool_input: dict[str, Any], output: str) -> None:
        answers.append(await post("codex", {"hook_event_name": "PreModelRequest", "kind": "sampling"}))
        fields = {"tool_name": "Bash", "tool_input": tool_input, "tool_use_id": f"call_{next(ids)}"}
        answer = await post("codex", {"hook_event_name": "PreToolUse", **fields})
        answers.append(answer)
        if not answer:
            answers.append(
                await post("codex", {"hook_event_name": "PostToolUse", **fields, "tool_response": output})
            )

    base = {"session_id": session, "turn_id": "t1", "cwd": "/ws"}
    answers.append(await post("codex", {**base, "hook_event_name": "UserPromptSubmit", "prompt": "fix"}))
    await call({"command": "cat a.py"}, "VALUE = 0\n")
    for i in range(3):
        await call({"command": f"apply_patch <<'EOF'\n-VALUE = {i}\n+VALUE = {i + 1}\nEOF\n"}, "")
        await call(TEST, FAILING)
        await call({"command": "cat a.py"}, f"VALUE = {i + 1}\n")
    for _ in range(8):
        await call(GREP, "./a.py:1:foo\n")
    answers.append(await post("codex", {"hook_event_name": "SessionEnd", "reason": "other"}))
    return answers


async def gemini_session(post: Post, session: str) -> list[dict[str, Any]]:
    answers = []
    for i in range(8):
        answers.append(await post("gemini", {"hook_event_name": "BeforeModel", "llm_request": {}}))
        fields = {"tool_name": "run_shell_command", "tool_input": {**GREP, "description": "look"}}
        answer = await post("gemini", {"hook_event_name": "BeforeTool", **fields})
        answers.append(answer)
        if answer.get("continue") is False:
            break
        if not answer:
            output = f"Output: ./a.py:1:foo\nProcess Group PGID: {4000 + i}"
            answers.append(
                await post(
                    "gemini",
                    {"hook_event_name": "AfterTool", **fields, "tool_response": {"llmContent": output}},
                )
            )
    answers.append(await post("gemini", {"hook_event_name": "SessionEnd", "reason": "exit"}))
    return answers


async def sessions(url: str, prefix: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http:

        def poster(session: str) -> Post:
            async def post(agent: str, payload: dict[str, Any]) -> dict[str, Any]:
                body = {"session_id": session, "cwd": "/ws", **payload}
                async with http.post(f"{url}/hooks/{agent}", json=body) as response:
                    assert response.status == 200
                    return await response.json()

            return post

        codex = await codex_session(poster(f"{prefix}-codex"), f"{prefix}-codex")
        gemini = await gemini_session(poster(f"{prefix}-gemini"), f"{prefix}-gemini")
        return codex + gemini


async def until_healthy(url: str, process: StallwatchProcess, timeout_s: float = 30.0) -> None:
    async with aiohttp.ClientSession() as http:

        async def healthy() -> bool:
            assert process.alive(), f"stallwatch serve --kafka exited:\n{process.log_tail()}"
            try:
                async with http.get(f"{url}/v1/health") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await until(
            healthy, timeout_s, lambda: f"stallwatch serve --kafka answered:\n{process.log_tail()}", 0.1
        )


async def test_serve_kafka_gives_the_hooks_the_same_answers_as_in_process():
    async with running_server() as local:
        expected = await sessions(local.url, "s")
    said = {str(a) for a in expected}
    assert any("Refused" in s for s in said) and any("additionalContext" in s for s in said)
    assert any("'continue': False" in s for s in said)  # Gemini's session was ended by the stop

    async with serving_worker(partitions=2) as (settings, _worker):
        port = free_port()
        serve = StallwatchProcess(
            settings,
            "serve",
            "serve",
            {},
            argv=[
                sys.executable,
                "-m",
                "stallwatch.cli.main",
                "serve",
                "--kafka",
                "--open",
                "--port",
                str(port),
            ],
        )
        try:
            await until_healthy(f"http://127.0.0.1:{port}", serve)
            through_kafka = await sessions(f"http://127.0.0.1:{port}", "s")
        finally:
            serve.stop()
    # Verdicts and stops come back with the proposal; a nudge is the worker's own command, sent
    # after the result it follows from: it reaches the agent with the next result at the latest.
    assert [_verdicts_only(a) for a in through_kafka] == [_verdicts_only(a) for a in expected]
    nudges, late = _nudges(expected), _nudges(through_kafka)
    assert [text for _, text in late] == [text for _, text in nudges] and nudges
    assert all(0 <= k - e <= 3 for (e, _), (k, _) in zip(nudges, late, strict=True))  # a call: 3 hooks


def _verdicts_only(answer: dict[str, Any]) -> dict[str, Any]:
    return {} if "additionalContext" in answer.get("hookSpecificOutput", {}) else answer


def _nudges(answers: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [
        (i, a["hookSpecificOutput"]["additionalContext"])
        for i, a in enumerate(answers)
        if "additionalContext" in a.get("hookSpecificOutput", {})
    ]
