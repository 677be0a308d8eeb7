"""Codex and Gemini CLI hooks against a real server: payloads of the documented shape, over HTTP.
Rounds end at each model request; Codex gets denials only, Gemini CLI `continue: false` too."""

from __future__ import annotations

import asyncio
import itertools

from stallwatch.serve.agents import AGENTS
from stallwatch.serve.hooks import HookSettings

_ids = itertools.count(1)


async def _codex(server, session, event, **fields):
    status, answer = await server.post(
        "/hooks/codex",
        {
            "session_id": session,
            "turn_id": "t1",
            "hook_event_name": event,
            "cwd": "/ws",
            "model": "gpt-fake",
            **fields,
        },
    )
    assert status == 200
    return answer


async def _codex_call(server, session, command, output):
    await _codex(server, session, "PreModelRequest", kind="sampling")
    call = {"tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": f"call_{next(_ids)}"}
    answer = await _codex(server, session, "PreToolUse", **call)
    if not answer:
        await _codex(server, session, "PostToolUse", **call, tool_response=output)
    return answer


async def test_codex_loop_is_denied_and_never_told_to_continue(server):
    answers = [await _codex_call(server, "cx", "grep -rn foo .", "./a.py:1:foo\n") for _ in range(9)]
    assert answers[0] == {}
    denials = [a for a in answers[1:] if a]
    assert len(denials) == 8
    for answer in denials:
        assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert "continue" not in answer  # beside a deny it would cancel the deny
    run = server.session_run("cx")
    assert run.stop is not None and run.round == 6  # one round per model request, until the stop
    assert denials[-1]["hookSpecificOutput"]["permissionDecisionReason"] == run.stop.reason


async def _gemini(server, session, event, **fields):
    status, answer = await server.post(
        "/hooks/gemini", {"session_id": session, "cwd": "/ws", "hook_event_name": event, **fields}
    )
    assert status == 200
    return answer


def _shell(output: str, pgid: int, code: int = 0) -> dict:
    exit_line = f"\nExit Code: {code}" if code else ""
    return {"llmContent": f"Output: {output}{exit_line}\nProcess Group PGID: {pgid}", "returnDisplay": output}


async def test_gemini_loop_is_denied_then_ended_with_continue_false(server):
    call = {"tool_name": "run_shell_command", "tool_input": {"command": "ls src", "description": "d"}}
    answers = []
    for i in range(9):
        await _gemini(server, "gm", "BeforeModel", llm_request={})
        answer = await _gemini(server, "gm", "BeforeTool", **call)
        if not answer:
            await _gemini(server, "gm", "AfterTool", **call, tool_response=_shell("a.py", 1000 + i))
        answers.append(answer)
    assert answers[0] == {} and answers[1]["decision"] == "deny" and "continue" not in answers[1]
    stopped = [a for a in answers if a.get("continue") is False]
    run = server.session_run("gm")
    assert stopped and stopped[0]["reason"] == stopped[0]["stopReason"] == run.stop.reason


async def test_gemini_failures_are_read_from_the_exit_code(server):
    call = {"tool_name": "run_shell_command", "tool_input": {"command": "python run.py"}}
    for i in range(8):
        await _gemini(server, "gf", "BeforeModel", llm_request={})
        answer = await _gemini(server, "gf", "BeforeTool", **call)
        if answer:
            break
        await _gemini(server, "gf", "AfterTool", **call, tool_response=_shell("Traceback", 2000 + i, code=1))
    assert server.session_run("gf").stop.code == "tool_failures"


async def test_codex_calls_wait_for_no_transcript(make_server, tmp_path):
    """Codex's rollout file is a .jsonl too, but holds no Claude Code responses: reading it for
    one would hold every call for the transcript wait (here far longer than the test's timeout)."""
    rollout = tmp_path / "rollout-1.jsonl"
    rollout.write_text('{"type":"session_meta","payload":{}}\n')
    async with make_server(hooks=HookSettings(transcript_wait_s=3600.0)) as server:
        await _codex(server, "cw", "PreModelRequest", kind="sampling")
        call = _codex(
            server,
            "cw",
            "PreToolUse",
            tool_name="Bash",
            tool_input={"command": "ls"},
            tool_use_id="call_1",
            transcript_path=str(rollout),
        )
        answer = await asyncio.wait_for(call, 60)  # a failure, not a hang, should a reader wait
        assert answer == {} and server.hooks.transcripts == {}


def _after(tool: str, llm_content: str) -> dict:
    return {
        "hook_event_name": "AfterTool",
        "tool_name": tool,
        "tool_input": {},
        "tool_response": {"llmContent": llm_content, "returnDisplay": ""},
    }


CI_LOG = "step 3 failed\nExit Code: 1\nProcess Group PGID: 4242\n"


def test_gemini_reads_the_exit_code_only_from_its_shells_trailer():
    gemini = AGENTS["gemini"]
    assert gemini.failed(_after("run_shell_command", "Output: boom\nExit Code: 2\nProcess Group PGID: 7"))
    assert gemini.failed(_after("run_shell_command", "Output: boom\nExit Code: 2"))
    assert not gemini.failed(_after("run_shell_command", "Output: ok\nProcess Group PGID: 7"))
    assert not gemini.failed(_after("read_file", CI_LOG)), "a CI log read is not a failure"
    assert not gemini.failed(
        _after("run_shell_command", "Output: ran `make`\n  Exit Code: 1 (old)\ndone\nProcess Group PGID: 7")
    ), "an Exit Code the command printed"
    printed_zero = "Output: Exit Code: 0\nExit Code: 0\nall fine?\nExit Code: 1\nProcess Group PGID: 7"
    assert gemini.failed(_after("run_shell_command", printed_zero)), "the output's own Exit Code: 0"
    wrapped = "<untrusted_context>\nOutput: boom\nExit Code: 1\nProcess Group PGID: 7\n</untrusted_context>"
    assert gemini.failed(_after("run_shell_command", wrapped)), "as Gemini CLI sends it"
    assert not gemini.failed(_after("run_shell_command", wrapped.replace("Exit Code: 1\n", "")))


def test_gemini_masks_only_its_shells_own_pgid():
    gemini = AGENTS["gemini"]
    assert gemini.result_view(_after("read_file", CI_LOG))["llmContent"] == CI_LOG
    shell = gemini.result_view(
        _after("run_shell_command", "Output: Process Group PGID: 1\nProcess Group PGID: 4242")
    )
    assert shell["llmContent"] == "Output: Process Group PGID: 1\n"
    wrapped = gemini.result_view(
        _after(
            "run_shell_command",
            "<untrusted_context>\nOutput: x\nProcess Group PGID: 4242\n</untrusted_context>",
        )
    )
    assert wrapped["llmContent"] == "<untrusted_context>\nOutput: x\n\n</untrusted_context>"


async def test_codex_patches_through_the_shell_get_no_result_and_are_not_waited_for(server):
    """Codex runs `apply_patch <<EOF` itself: a PreToolUse as `Bash`, and no PostToolUse."""
    for i in range(3):
        await _codex(server, "cp", "PreModelRequest", kind="sampling")
        patch = f"apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n+v{i}\n*** End Patch\nEOF"
        assert (
            await _codex(
                server,
                "cp",
                "PreToolUse",
                tool_name="Bash",
                tool_input={"command": patch},
                tool_use_id=f"patch_{i}",
            )
            == {}
        )
    await _codex(server, "cp", "PreModelRequest", kind="sampling")
    (held,) = server.service.held.values()
    assert held.extra["rounds"].calls == {}
