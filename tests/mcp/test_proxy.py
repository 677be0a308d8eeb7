"""`stallwatch mcp-proxy` between a real MCP client session and a real MCP server process."""

from __future__ import annotations

import asyncio
import json

import pytest

from stallwatch.engine import words
from tests.mcp.session import next_round, proxy_session, text

pytestmark = pytest.mark.e2e  # a real MCP client session through the proxy process

NO_NEW_FACTS = words.stop_reason("no_new_facts", {"already_seen_streak": 5})


async def test_a_rewording_loop_is_nudged_then_stopped_and_every_later_call_gets_the_stop():
    async with proxy_session() as session:
        results = []
        for i in range(8):
            results.append(await session.call_tool("search", {"query": f"kafka storage, wording {i}"}))
            await next_round()
        later = await session.call_tool("page", {"cursor": 1})  # another tool, new arguments
    assert [r.is_error for r in results] == [False] * 6 + [True] * 2
    assert "kafka-docs" in text(results[0]) and "[stallwatch]" not in text(results[0])
    assert text(results[4]).endswith(f"[stallwatch] {words.nudge(3)}")  # on the result after it
    assert text(results[6]) == text(results[7]) == text(later) == NO_NEW_FACTS
    assert later.is_error


async def test_an_exact_repeat_is_refused_with_the_words_and_does_not_reach_the_server():
    async with proxy_session() as session:
        first = await session.call_tool("page", {"cursor": 7})
        await next_round()
        again = await session.call_tool("page", {"cursor": 7})
        other = await session.call_tool("page", {"cursor": 8})
    assert not first.is_error and json.loads(text(first))["items"][0] == "item-7-0"
    assert again.is_error and text(again) == words.duplicate_call("page")
    assert not other.is_error


async def test_a_paging_client_runs_to_the_end_untouched():
    async with proxy_session() as session:
        pages = []
        for cursor in range(8):  # past the five rounds after which a loop would stop
            pages.append(await session.call_tool("page", {"cursor": cursor}))
            await next_round()
    assert not any(p.is_error for p in pages)
    assert [json.loads(text(p)) for p in pages] == [
        {"items": [f"item-{c}-{i}" for i in range(3)], "next": c + 1} for c in range(8)
    ]


async def test_a_wait_declared_exempt_is_never_refused_and_never_stopped():
    async with proxy_session("--exempt", "wait_*") as session:
        waits = []
        for _ in range(8):
            waits.append(await session.call_tool("wait_for_researchers", {}))
            await next_round()
    assert [text(w) for w in waits] == ["still running"] * 8 and not any(w.is_error for w in waits)


async def test_the_administrators_policy_file_exempts_a_wait_as_well(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\nrepeat_exempt = ["wait_for_*"]\n')
    async with proxy_session(env={"STALLWATCH_POLICY_FILE": str(policy)}) as session:
        waits = []
        for _ in range(7):
            waits.append(await session.call_tool("wait_for_researchers", {}))
            await next_round()
    assert not any(w.is_error for w in waits)


async def test_without_the_declaration_the_same_wait_is_refused():
    async with proxy_session() as session:
        await session.call_tool("wait_for_researchers", {})
        await next_round()
        again = await session.call_tool("wait_for_researchers", {})
    assert again.is_error and text(again) == words.duplicate_call("wait_for_researchers")


async def test_calls_back_to_back_or_overlapping_form_one_round():
    """Ten rewordings with no pause, then three at once: two rounds, so the already-seen
    streak is at most 2 and nothing stops; the same calls a round apart are stopped."""
    async with proxy_session("--exempt", "wait_*", gap_s=1.0) as session:
        burst = [await session.call_tool("search", {"query": f"burst {i}"}) for i in range(10)]
        await next_round(1.0)
        overlapping = await asyncio.gather(
            *(session.call_tool("search", {"query": f"together {i}"}) for i in range(3)),
            session.call_tool("wait_for_researchers", {"seconds": 0.3}),
        )
    assert not any(r.is_error for r in [*burst, *overlapping])
    assert not any("[stallwatch]" in text(r) for r in [*burst, *overlapping])  # not even a nudge


async def test_after_a_long_pause_a_new_run_starts_and_tools_work_again():
    async with proxy_session("--new-run-after", "3") as session:
        for i in range(7):
            await session.call_tool("search", {"query": f"wording {i}"})
            await next_round()
        stopped = await session.call_tool("search", {"query": "one more"})
        await asyncio.sleep(3.5)  # the thing under test: a pause past --new-run-after
        fresh = await session.call_tool("search", {"query": "wording 0"})  # a repeat of the old run
    assert stopped.is_error and text(stopped) == NO_NEW_FACTS
    assert not fresh.is_error and "kafka-docs" in text(fresh)


async def test_tools_list_passes_through_and_instructions_carry_the_rules():
    async with proxy_session("--exempt", "wait_*") as session:
        tools = await session.list_tools()
        instructions = session.instructions
    assert [t.name for t in tools.tools] == ["search", "page", "wait_for_researchers", "fail"]
    assert tools.tools[1].input_schema["properties"]["cursor"]["type"] == "integer"
    assert instructions is not None and "wait_for_researchers" in instructions


async def test_a_tool_that_keeps_failing_is_reported_as_errors_and_stopped():
    async with proxy_session() as session:
        failures = [await session.call_tool("fail", {"reason": f"attempt {i}"}) for i in range(5)]
        after = await session.call_tool("page", {"cursor": 1})
    assert all(f.is_error and "Error executing tool fail" in text(f) for f in failures)
    assert after.is_error and text(after) == words.stop_reason(
        "tool_failures", {"tool": "fail", "consecutive_failures": 5}
    )


async def test_an_observe_only_deployment_lets_the_loop_run_untouched():
    async with proxy_session(env={"STALLWATCH_OBSERVE_ONLY": "true"}) as session:
        results = []
        for i in range(8):
            results.append(await session.call_tool("search", {"query": f"kafka storage, wording {i}"}))
            await next_round()
        again = await session.call_tool("search", {"query": "kafka storage, wording 0"})
    assert not any(r.is_error for r in [*results, again])  # no refusal, no stop
    assert not any("[stallwatch]" in text(r) for r in results)  # no nudge either
    assert all("kafka-docs" in text(r) for r in [*results, again])
