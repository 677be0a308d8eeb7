"""The in-process client skips JSON and validation for a run's events; its commands must still be
exactly those the Kafka path (events serialised, parsed and validated by the worker's parser)
gives for the same events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stallwatch.client import EmbeddedClient
from stallwatch.contract.commands import Command, encode_command
from stallwatch.contract.parse import parse_event
from stallwatch.engine.embedded import EmbeddedEngine, Rejected

DOCS = {"documents": [{"id": "a"}, {"id": "b"}]}


class RecordingEngine(EmbeddedEngine):
    """The engine behind the client, keeping each event it got and the commands it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[dict[str, Any], list[Command]]] = []

    def handle(self, event: dict[str, Any]) -> list[Command]:
        commands = super().handle(event)
        self.log.append((event, commands))
        return commands


def recording_client() -> tuple[EmbeddedClient, RecordingEngine]:
    client = EmbeddedClient()
    client.engine = engine = RecordingEngine()
    client._apply = engine.handle
    return client, engine


async def scripted_runs(client: EmbeddedClient) -> None:
    """A rewording researcher (nudged, then stopped), an exact repeat, a paging researcher with
    tuple arguments, a chat that insists, and calls after the stop."""
    looper = await client.start_run("looper", "researcher", [{"name": "search"}])
    for i in range(9):
        await looper.start_round()
        for args in ({"q": f"wording {i}"}, {"q": "wording 0"}):
            call_id, decision = await looper.propose("search", args)
            if decision.allowed:
                await looper.result(call_id, "search", "ok", DOCS)
        await looper.end_round()
    pager = await client.start_run("pager", "researcher", [{"name": "page"}])
    for i in range(6):
        await pager.start_round()
        call_id, _ = await pager.propose("page", ("cursor", i))
        await pager.result(call_id, "page", "ok", {"items": [i]}, send_content=True)
        await pager.end_round()
    await pager.end("done")
    chat = await client.start_run("chat", "chat", [{"name": "price"}], policy={"max_rounds": 2})
    for _ in range(3):
        await chat.start_round()
        for _ in range(4):
            call_id, decision = await chat.propose("price", {"s": "A"})
            if decision.allowed:
                await chat.result(call_id, "price", "error")
        await chat.end_round()


async def test_in_process_commands_equal_those_of_the_parsed_events():
    client, engine = recording_client()
    await scripted_runs(client)
    in_process = [encode_command(c) for _, commands in engine.log for c in commands]
    parsed = []
    for result in EmbeddedEngine().replay(orjson.dumps(event) for event, _ in engine.log):
        assert not isinstance(result, Rejected), result.letter.error
        parsed.extend(encode_command(c) for c in result)
    assert in_process == parsed
    kinds = {orjson.loads(c)["type"] for c in in_process}
    codes = {orjson.loads(c).get("code") for c in in_process}
    assert kinds == {"verdict", "nudge", "stop"}
    assert {"duplicate_call", "run_stopped", "repeated_call", "no_new_facts"} <= codes


async def test_every_event_a_run_builds_passes_the_parser_unchanged():
    client, engine = recording_client()
    await scripted_runs(client)
    for event, _ in engine.log:
        assert parse_event(orjson.dumps(event)) == orjson.loads(orjson.dumps(event))


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda run: run.propose(5, {}), TypeError),
        (lambda run: run.propose("search", {}, call_id=7), TypeError),
        (lambda run: run.result("c", "search", "fine"), ValueError),
        (lambda run: run.result("c", None, "ok"), ValueError),
        (lambda run: run.end(reason=3), TypeError),
    ],
)
async def test_arguments_that_would_break_the_contract_are_refused_where_they_come_in(call, error):
    async with EmbeddedClient() as client:
        run = await client.start_run("r", "researcher", [{"name": "search"}])
        await run.start_round()
        with pytest.raises(error):
            await call(run)
        _, decision = await run.propose("search", {"q": 1})
    assert decision.allowed and not decision.timed_out


async def test_a_new_handle_for_a_run_id_is_not_taken_for_redeliveries_of_the_old_one():
    async with EmbeddedClient() as client:
        first = await client.start_run("same", "researcher", [{"name": "search"}])
        await first.start_round()
        await first.propose("search", {"q": 1})
        again = await client.start_run("same", "researcher", [{"name": "search"}])
        await again.start_round()
        _, decision = await again.propose("search", {"q": 1})
    # Counter-based ids alone would repeat the first handle's; the verdict would never come.
    assert not decision.timed_out and decision.code == "duplicate_call"
