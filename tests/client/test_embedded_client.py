"""The in-process client: the same calls as the Kafka client, answered at once, no broker."""

from __future__ import annotations

import pytest

from stallwatch.client import EmbeddedClient
from stallwatch.engine.canonical import fingerprint

DOCS = {"documents": [{"id": "a"}, {"id": "b"}]}


async def test_a_rewording_researcher_is_refused_then_stopped():
    async with EmbeddedClient() as client:
        run = await client.start_run("r1", "researcher", [{"name": "search"}])
        decisions = []
        for i in range(8):
            await run.start_round()
            call_id, decision = await run.propose("search", {"q": f"wording {i}"})
            decisions.append(decision)
            if decision.allowed:
                await run.result(call_id, "search", "ok", DOCS)
            await run.end_round()
        assert [d.allowed for d in decisions] == [True] * 6 + [False] * 2
        assert decisions[-1].code == "run_stopped"
        assert run.stop is not None and run.stop.code == "no_new_facts" and run.stopped.is_set()


async def test_only_a_fingerprint_leaves_the_runtime_by_default():
    sent = []
    async with EmbeddedClient() as client:
        original = client._apply  # what the run hands to the engine, event by event

        def spy(event):
            sent.append(event)
            return original(event)

        client._apply = spy
        run = await client.start_run("r2", "researcher", [{"name": "search"}])
        await run.start_round()
        call_id, _ = await run.propose("search", {"q": "secret"})
        await run.result(call_id, "search", "ok", {"token": "s3cr3t"})
    result = sent[-1]
    assert "result" not in result and result["fingerprint"] == fingerprint({"token": "s3cr3t"})[0]
    assert b"s3cr3t" not in repr(sent).encode()


async def test_the_system_prompt_names_the_thresholds_and_exempt_tools():
    async with EmbeddedClient() as client:
        run = await client.start_run(
            "r3",
            "chat",
            [{"name": "wait", "repeat_exempt": True}],
            policy={"loop_detect_threshold": 4, "call_budget": 9},
        )
        text = run.system_prompt()
    assert "4 times in a row" in text and "At most 9 tool calls" in text and "wait" in text


async def test_a_call_id_too_long_for_a_verdict_is_still_matched_to_its_call():
    async with EmbeddedClient() as client:
        run = await client.start_run("r4", "researcher", [{"name": "search"}])
        await run.start_round()
        long_id = "c" * 5_000  # the verdict carries a marked digest of it
        _, first = await run.propose("search", {"q": 1}, call_id=long_id)
        _, again = await run.propose("search", {"q": 1}, call_id=long_id + "2")
    assert (first.allowed, first.timed_out) == (True, False)
    assert (again.allowed, again.code, again.timed_out) == (False, "duplicate_call", False)


async def test_a_coding_agent_through_the_client_decides_as_when_results_are_sent():
    """Fingerprints hashed in the runtime (durations masked there too) give the decisions the
    engine gives when it sees the results: a stall nudge, re-reads allowed after edits."""

    async def agent(send_content: bool) -> tuple[list, list]:
        async with EmbeddedClient() as client:
            run = await client.start_run("c1", "coder", [{"name": "bash"}, {"name": "editor"}])
            codes = []
            for n in range(4):
                await run.start_round()
                for tool, args, effect, out in (
                    (
                        "editor",
                        {"command": "str_replace", "path": "a.py", "new": f"v{n}"},
                        None,
                        "The file a.py has been edited.",
                    ),
                    ("editor", {"command": "view", "path": "a.py"}, "read", f"v{n}"),
                    ("bash", {"command": "python repro.py"}, None, f"Error: still broken (took 0.0{n}s)"),
                ):
                    call_id, decision = await run.propose(tool, args, effect=effect)
                    codes.append(decision.code)
                    if decision.allowed:
                        await run.result(call_id, tool, "ok", out, send_content=send_content)
                await run.end_round()
            assert "with nothing else changed between, ends tool use" in run.system_prompt()
            return codes, [n.detail for n in run.nudges]

    hashed, sent = await agent(False), await agent(True)
    assert hashed == sent
    codes, nudges = hashed
    assert set(codes) == {None}
    assert [n["call"] for n in nudges] == ["python repro.py"]


async def test_an_effect_outside_the_contract_is_refused_by_the_client():
    async with EmbeddedClient() as client:
        run = await client.start_run("c3", "coder", [{"name": "bash"}])
        await run.start_round()
        with pytest.raises(ValueError, match="effect must be one of"):
            await run.propose("bash", {"command": "ls"}, effect="READ")
