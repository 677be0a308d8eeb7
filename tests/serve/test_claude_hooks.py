"""Claude Code's hooks against a real server: payloads of the documented shape, over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import threading
import time
from pathlib import Path

from stallwatch.serve.hooks import TRANSCRIPT_READ_BYTES, HookSettings
from tests.serve.conftest import session_of
from tests.waiting import until

_ids = itertools.count(1)


class Session:
    """One Claude Code session: writes its transcript as Claude Code does (one line per
    assistant content block, sharing `message.id`) and sends its hooks to the server."""

    def __init__(self, server, tmp: Path, session_id: str = "sess-1", transcript: bool = True) -> None:
        self.server = server
        self.session_id = session_id
        self.path = tmp / f"{session_id}.jsonl" if transcript else None
        if self.path is not None:
            self.path.write_text(
                json.dumps({"type": "user", "message": {"role": "user", "content": "fix it"}}) + "\n"
            )

    def response(self, *calls: tuple[str, dict]) -> list[tuple[str, str, dict]]:
        """One model response: its calls, written to the transcript under one message id."""
        message_id = f"msg_{next(_ids)}"
        made = [(f"toolu_{next(_ids)}", tool, args) for tool, args in calls]
        if self.path is not None:
            with self.path.open("a") as f:
                for tool_use_id, tool, args in made:
                    f.write(
                        json.dumps(
                            {
                                "type": "assistant",
                                "message": {
                                    "id": message_id,
                                    "role": "assistant",
                                    "content": [
                                        {"type": "tool_use", "id": tool_use_id, "name": tool, "input": args}
                                    ],
                                },
                            }
                        )
                        + "\n"
                    )
        return made

    def _base(self, event: str, tool_use_id: str, tool: str, args: dict) -> dict:
        base = {
            "session_id": self.session_id,
            "cwd": "/ws",
            "permission_mode": "default",
            "hook_event_name": event,
            "tool_name": tool,
            "tool_input": args,
            "tool_use_id": tool_use_id,
        }
        if self.path is not None:
            base["transcript_path"] = str(self.path)
        return base

    async def pre(self, call: tuple[str, str, dict]) -> dict:
        status, answer = await self.server.post("/hooks/claude", self._base("PreToolUse", *call))
        assert status == 200
        return answer

    async def post(self, call: tuple[str, str, dict], response: dict | str, failed: bool = False) -> dict:
        if failed:
            payload = self._base("PostToolUseFailure", *call) | {"error": response, "is_interrupt": False}
        else:
            payload = self._base("PostToolUse", *call) | {"tool_response": response}
        status, answer = await self.server.post("/hooks/claude", payload)
        assert status == 200
        return answer

    async def run(self, tool: str, args: dict, response: dict | str, failed: bool = False) -> dict:
        """One response with one call: its PreToolUse, and its result if it was allowed."""
        (call,) = self.response((tool, args))
        answer = await self.pre(call)
        if not answer:
            await self.post(call, response, failed)
        return answer

    def run_state(self):
        return self.server.session_run(self.session_id)


def bash(command: str) -> dict:
    return {"command": command, "description": "a description the model varies"}


def shell_out(stdout: str) -> dict:
    return {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False}


def denied(answer: dict) -> str | None:
    out = answer.get("hookSpecificOutput", {})
    if out.get("permissionDecision") == "deny":
        assert out["hookEventName"] == "PreToolUse"
        return out["permissionDecisionReason"]
    return None


async def test_the_same_grep_with_the_same_output_is_refused_in_stallwatchs_words(server, tmp_path):
    s = Session(server, tmp_path)
    assert await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo")) == {}
    answer = await s.run("Bash", {"command": "grep -rn foo .", "description": "again"}, shell_out("x"))
    reason = denied(answer)
    assert reason is not None and "`Bash` already ran" in reason
    assert "continue" not in answer


async def test_looping_on_one_grep_stops_the_run_and_every_later_call_is_denied(server, tmp_path):
    s = Session(server, tmp_path)
    await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo"))
    answers = [await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo")) for _ in range(8)]
    stops = [a for a in answers if a.get("continue") is False]
    assert stops, answers
    stop = s.run_state().stop
    assert stops[0]["stopReason"] == stop.reason == denied(stops[0])
    later = await s.run("Read", {"file_path": "/ws/other.py"}, {"type": "text"})
    assert later["continue"] is False and denied(later) == stop.reason


async def test_a_test_re_run_after_each_edit_is_never_refused(server, tmp_path):
    s = Session(server, tmp_path)
    for i in range(6):
        assert await s.run("Bash", bash("python -m pytest -q"), shell_out(f"{i} failed")) == {}
        edit = {"file_path": "/ws/a.py", "old_string": f"v{i}", "new_string": f"v{i + 1}"}
        assert await s.run("Edit", edit, {"filePath": "/ws/a.py"}) == {}
    assert s.run_state().stop is None


async def test_a_file_re_read_after_it_was_written_is_not_refused(server, tmp_path):
    s = Session(server, tmp_path)
    read = {"file_path": "/ws/a.py"}
    assert await s.run("Read", read, {"file": {"content": "v1"}}) == {}
    assert await s.run("Write", {"file_path": "/ws/a.py", "content": "v2"}, {"type": "update"}) == {}
    assert await s.run("Read", read, {"file": {"content": "v2"}}) == {}
    assert denied(await s.run("Read", read, {"file": {"content": "v2"}})) is not None  # nothing changed


async def test_a_shell_command_that_only_reads_is_a_read_and_others_are_not(server, tmp_path):
    s = Session(server, tmp_path)
    for command in ("cat a.py | head -5", "sed -i s/a/b/ a.py"):
        await s.run("Bash", bash(command), shell_out(""))
    assert denied(await s.run("Bash", bash("sed -i s/a/b/ a.py"), shell_out(""))) is None
    assert denied(await s.run("Bash", bash("ls src"), shell_out("x"))) is None
    assert denied(await s.run("Bash", bash("ls src"), shell_out("x"))) is not None


async def test_failures_are_reported_as_failures(server, tmp_path):
    """The same command failing with nothing else changed stops with tool_failures; reported
    as successes the same results would be a stall, which never stops by default."""
    s = Session(server, tmp_path)
    for _ in range(8):
        answer = await s.run("Bash", bash("python run.py"), "Exit code 1\nTraceback", failed=True)
        if answer:
            break
    assert s.run_state().stop is not None and s.run_state().stop.code == "tool_failures"


async def test_the_calls_of_one_response_are_one_round_even_when_the_transcript_lags(make_server, tmp_path):
    """With no gap at all the time rule would give each call its own round: the transcript's
    message id, read once it lands, keeps the three together. The lines land only once the first
    hook has looked and not found them (the wait is far longer than the test may take)."""
    async with make_server(hooks=HookSettings(round_gap_s=0.0, transcript_wait_s=3600.0)) as server:
        s = Session(server, tmp_path)
        calls = s.response(("Bash", bash("echo 1")), ("Bash", bash("echo 2")), ("Read", {"file_path": "b"}))
        lines = s.path.read_text().splitlines(keepends=True)
        s.path.write_text(lines[0])  # Claude Code writes the response after the hooks fire

        first = asyncio.create_task(s.pre(calls[0]))
        await until(
            lambda: (reader := server.hooks.transcripts.get(s.session_id)) is not None and reader.bytes_read,
            60,
            "the first hook looked in the transcript",
        )
        assert not first.done()  # waiting for its line
        with s.path.open("a") as f:
            f.writelines(lines[1:])
        assert await first == {}
        await s.post(calls[0], shell_out("1"))
        for call in calls[1:]:
            assert await s.pre(call) == {}
            await s.post(call, shell_out("1"))
        assert s.run_state().round == 1
        await s.run("Bash", bash("echo 3"), shell_out("3"))
        assert s.run_state().round == 2


async def test_parallel_hooks_of_one_response_are_judged_one_at_a_time(server, tmp_path):
    s = Session(server, tmp_path)
    calls = s.response(*(("Bash", bash("grep -n foo a.py")) for _ in range(5)))
    answers = await asyncio.gather(*(s.pre(c) for c in calls))
    assert sum(1 for a in answers if a == {}) == 1
    assert s.run_state().round == 1


async def test_without_a_transcript_calls_close_in_time_share_a_round(make_server, tmp_path):
    clock = Clock()
    async with make_server(hooks=HookSettings(round_gap_s=0.3, clock=clock)) as server:
        s = Session(server, tmp_path, transcript=False)
        a, b = s.response(("Bash", bash("echo 1")), ("Bash", bash("echo 2")))
        await s.pre(a)
        await s.pre(b)
        await s.post(a, shell_out("1"))
        await s.post(b, shell_out("2"))
        assert s.run_state().round == 1
        clock.now += 0.4  # past the gap
        await s.run("Bash", bash("echo 3"), shell_out("3"))
        assert s.run_state().round == 2


async def test_a_nudge_rides_on_the_next_result_as_context(make_server, tmp_path):
    async with make_server(hooks=HookSettings(policy={"stall_nudge_at": 2})) as server:
        s = Session(server, tmp_path)
        context = []
        for i in range(4):
            (call,) = s.response(("Bash", bash("python repro.py")))
            assert await s.pre(call) == {}
            answer = await s.post(call, shell_out("still broken"))
            context.append(answer.get("hookSpecificOutput", {}).get("additionalContext"))
            await s.run("Edit", {"file_path": "a.py", "old_string": str(i), "new_string": "x"}, {})
        notes = [c for c in context if c]
        assert notes and notes[0].startswith("[stallwatch] ")


async def test_a_new_prompt_after_a_stop_starts_a_new_run(server, tmp_path):
    s = Session(server, tmp_path)
    for _ in range(9):
        await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo"))
    assert s.run_state().stop is not None
    await server.post(
        "/hooks/claude",
        {"session_id": s.session_id, "hook_event_name": "UserPromptSubmit", "prompt": "now something else"},
    )
    assert await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo")) == {}
    await server.post("/hooks/claude", {"session_id": s.session_id, "hook_event_name": "SessionEnd"})
    assert server.service.held == {}


async def test_junk_and_unknown_agents_get_no_opinion(server):
    status, answer = await server.post("/hooks/claude", ["not", "an", "object"])
    assert status == 200 and answer == {}
    status, answer = await server.post("/hooks/claude", {"hook_event_name": "PreToolUse"})
    assert answer == {}
    status, answer = await server.post("/hooks/cursor", {})
    assert status == 404 and "claude" in answer["error"]


async def test_a_session_idle_for_too_long_is_ended_at_the_next_hook(server, tmp_path):
    old, new = Session(server, tmp_path, "old"), Session(server, tmp_path, "new")
    await old.run("Bash", bash("ls"), shell_out("a"))
    server.service.idle_s = 0.0
    later = time.monotonic() + 61.0
    server.service.clock = lambda: later  # a minute on: the once-a-minute sweep is due
    await new.run("Bash", bash("ls"), shell_out("a"))
    assert {session_of(r) for r in server.service.held} == {"new"}


async def test_a_fifo_as_transcript_blocks_nothing(server, tmp_path):
    """The path is the payload's: opening a FIFO for reading waits for a writer, and in the event
    loop that would hold every hook of every session."""
    fifo = tmp_path / "trap.jsonl"
    os.mkfifo(fifo)
    answered, answered_before_a_writer = threading.Event(), []

    def writer() -> None:  # frees a reader stuck in open(), after looking whether it was stuck
        answered_before_a_writer.append(answered.wait(5.0))
        if not answered.is_set():
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        status, answer = await server.post(
            "/hooks/claude",
            {
                "session_id": "fifo",
                "hook_event_name": "PreToolUse",
                "tool_name": "Bash",
                "tool_input": bash("ls"),
                "tool_use_id": "toolu_1",
                "transcript_path": str(fifo),
            },
        )
        answered.set()
    finally:
        thread.join()
    assert status == 200 and answer == {}
    assert answered_before_a_writer == [True]
    assert server.hooks.transcripts["fifo"].regular is False  # never opened again


async def test_a_huge_transcript_is_read_from_its_tail_in_bounded_reads(server, tmp_path):
    s = Session(server, tmp_path, "huge")
    filler = json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 1000}}) + "\n"
    with s.path.open("a") as f:
        f.write(filler * (3 * TRANSCRIPT_READ_BYTES // len(filler)))
        f.write(json.dumps({"type": "user", "message": {"content": "y" * (2 * TRANSCRIPT_READ_BYTES)}}))
        f.write("\n")
    calls = s.response(("Bash", bash("echo 1")), ("Bash", bash("echo 2")))
    for call in calls:  # two calls of one response, the gap rule would not join them (no results)
        assert await s.pre(call) == {}
    transcript = server.hooks.transcripts["huge"]
    assert transcript.bytes_read <= 2 * TRANSCRIPT_READ_BYTES  # not the whole 5 MiB
    assert s.run_state().round == 1 and transcript.response_of == {}  # found, then let go


async def test_a_sessions_new_run_reads_its_transcript_on_from_where_it_was(server, tmp_path):
    s = Session(server, tmp_path, "two-runs")
    for _ in range(9):
        await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo"))
    assert s.run_state().stop is not None
    reader = server.hooks.transcripts["two-runs"]
    read = reader.bytes_read
    await server.post(
        "/hooks/claude",
        {"session_id": s.session_id, "hook_event_name": "UserPromptSubmit", "prompt": "now something else"},
    )
    assert await s.run("Bash", bash("ls"), shell_out("a")) == {}
    assert server.hooks.transcripts["two-runs"] is reader
    assert reader.bytes_read - read < 1000  # the new line only, not the file again


async def test_a_hook_that_fails_is_logged_by_type_and_line_never_its_message(
    server, tmp_path, monkeypatch, caplog
):
    """Hook payloads carry tool input and output: an exception's message can quote them."""
    import stallwatch.serve.agents as agents

    def quoting_parser(command: str, persistent: bool) -> str:
        raise ValueError(f"cannot parse {command!r}")

    monkeypatch.setattr(agents, "shell_effect", quoting_parser)
    s = Session(server, tmp_path, "faulty")
    with caplog.at_level(logging.WARNING, logger="stallwatch.serve.hooks"):
        answer = await s.run("Bash", bash("curl -H 'Authorization: Bearer sk-live-123' x"), shell_out(""))
    assert answer == {}  # the call runs
    (record,) = [r for r in caplog.records if r.name == "stallwatch.serve.hooks"]
    said = record.getMessage() + (
        logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
    )
    assert "sk-live-123" not in said and "ValueError at test_claude_hooks.py:" in said


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_call_whose_result_never_comes_lapses_and_rounds_go_on(make_server, tmp_path):
    """A denied permission or an interrupt gets no PostToolUse: in flight for ever, it would keep
    the gap rule from ever starting a new round."""
    clock = Clock()
    settings = HookSettings(round_gap_s=1.0, pending_lapse_s=600.0, clock=clock)
    async with make_server(hooks=settings) as server:
        s = Session(server, tmp_path, "lapse", transcript=False)
        (denied_by_the_user,) = s.response(("Bash", bash("rm -rf build")))
        assert await s.pre(denied_by_the_user) == {}  # allowed by stallwatch; no result follows
        clock.now += 30.0
        await s.run("Bash", bash("ls"), shell_out("a"))
        assert s.run_state().round == 1  # still in flight: the gap rule waits for it
        clock.now += 601.0
        await s.run("Bash", bash("ls src"), shell_out("b"))
        assert s.run_state().round == 2
        (held,) = server.service.held.values()
        assert held.extra["rounds"].in_flight == 0


async def test_a_new_response_lets_go_of_the_last_ones_calls_without_results(server, tmp_path):
    s = Session(server, tmp_path, "responses")
    calls = s.response(("Bash", bash("echo 1")), ("Bash", bash("echo 2")))
    for call in calls:
        assert await s.pre(call) == {}
    await s.post(calls[0], shell_out("1"))  # the second was interrupted: no result
    await s.run("Bash", bash("echo 3"), shell_out("3"))
    (held,) = server.service.held.values()
    assert held.extra["rounds"].calls == {} and s.run_state().round == 2


async def test_an_observe_only_session_is_never_denied_or_stopped_and_its_would_stop_is_held(
    make_server, tmp_path
):
    async with make_server(hooks=HookSettings(policy={"observe_only": True})) as server:
        s = Session(server, tmp_path)
        await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo"))
        answers = [await s.run("Bash", bash("grep -rn foo ."), shell_out("a.py:1:foo")) for _ in range(8)]
        assert answers == [{}] * 8  # every call allowed, no stop, no nudge context
        run = s.run_state()
        assert run.stop is None and run.would_stop is not None and run.nudges == []
