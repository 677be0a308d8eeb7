"""Run ids of hook sessions: never the same twice, across a server's restarts and a session's
own runs, so the detector (a worker that outlives the server) never takes a new run for an old one."""

from __future__ import annotations

import itertools
import time

from stallwatch.client import EmbeddedClient

_ids = itertools.count(1)


def _bash(session: str, event: str, tool_use_id: str, command: str, **fields: object) -> dict:
    return {
        "session_id": session,
        "hook_event_name": event,
        "tool_name": "Bash",
        "cwd": "/ws",
        "tool_input": {"command": command},
        "tool_use_id": tool_use_id,
        **fields,
    }


async def _rounds(server, session: str, commands: list[str]) -> list[dict]:
    """A round per command (Codex's shape: a model request, a call, its result if allowed)."""
    answers = []
    for command in commands:
        await server.post("/hooks/codex", {"session_id": session, "hook_event_name": "PreModelRequest"})
        call = _bash(session, "PreToolUse", f"call_{next(_ids)}", command)
        _, answer = await server.post("/hooks/codex", call)
        answers.append(answer)
        if not answer:
            await server.post(
                "/hooks/codex", {**call, "hook_event_name": "PostToolUse", "tool_response": "same output"}
            )
    return answers


async def test_a_restarted_server_starts_a_new_run_for_a_live_session(make_server):
    """The detector outlives the server (a worker behind Kafka; here one engine shared by two
    servers): the session's calls after the restart must get verdicts, not be taken for
    redeliveries of the old run's rounds."""
    engine = EmbeddedClient()
    async with make_server(client=engine) as first:
        await _rounds(first, "live", ["ls a", "ls b", "ls c", "ls d"])
        (before,) = first.service.held
    async with make_server(client=engine) as second:  # the old server died without SessionEnd
        answers = await _rounds(second, "live", ["ls e", "ls e"])
        (after,) = second.service.held
    assert after != before and after.startswith("live.")
    assert answers[0] == {}
    assert answers[1]["hookSpecificOutput"]["permissionDecision"] == "deny"  # judged, not timed out


async def test_a_session_id_that_comes_back_gets_a_run_id_never_used(server):
    ids = []
    for _ in range(3):
        await _rounds(server, "again", ["ls"])
        ids.extend(server.service.held)
        await server.post("/hooks/codex", {"session_id": "again", "hook_event_name": "SessionEnd"})
    assert len(set(ids)) == 3 and server.service.held == {}


async def test_a_session_ended_as_idle_goes_on_in_a_new_run(server):
    await _rounds(server, "idle", ["ls"])
    (swept,) = server.service.held
    server.service.idle_s = 0.0
    later = time.monotonic() + 61.0
    server.service.clock = lambda: later  # a minute on: the once-a-minute sweep is due
    assert await _rounds(server, "idle", ["ls"]) == [{}]  # a new run: the same call is new there
    (now,) = server.service.held
    assert now != swept and now.startswith("idle.")
