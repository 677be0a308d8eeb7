"""What every adapter shares, without a framework: rounds, words for the model, odd results."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stallwatch.adapters.core import Guard, ModelTurn, RunSpec
from stallwatch.client import EmbeddedClient
from stallwatch.engine import words


class Doc(BaseModel):
    id: str


async def rounds(guard: Guard, results: list[Any]) -> list[ModelTurn]:
    """One model call per result, each making one call that returns it; then one more call."""
    turns = []
    for i, result in enumerate(results):
        turns.append(await guard.begin_model_call(["search"]))
        call_id, decision = await guard.propose("search", {"q": f"wording {i}"})
        assert decision.allowed
        await guard.report(call_id, "search", True, result)
    turns.append(await guard.begin_model_call())
    return turns


async def test_framework_objects_are_compared_by_content():
    guard = Guard(EmbeddedClient(), RunSpec())
    turns = await rounds(guard, [[Doc(id="a"), Doc(id="b")] for _ in range(6)])
    assert turns[-1].stop is not None and turns[-1].stop.code == "no_new_facts"
    assert not turns[-1].tools_allowed and not turns[-1].end_turn
    assert turns[-1].notes == [turns[-1].stop.reason]


async def test_a_nudge_is_shown_once_at_the_next_model_call():
    guard = Guard(EmbeddedClient(), RunSpec())
    turns = await rounds(guard, [{"same": True}] * 5)
    assert [t.notes for t in turns] == [[], [], [], [], [words.nudge(3)], []]


async def test_a_result_beyond_canonical_json_counts_as_new():
    guard = Guard(EmbeddedClient(), RunSpec())
    turns = await rounds(guard, [{"n": 2**70}] * 8)  # wider than 64 bits: cannot be compared
    assert all(t.stop is None and t.notes == [] for t in turns)


async def test_finish_ends_the_run_and_forgets_it():
    client = EmbeddedClient()
    guard = Guard(client, RunSpec(run_id_prefix="t"))
    await guard.begin_model_call()
    await guard.finish("answered")
    await guard.finish("again")  # idempotent
    assert guard.run_id.startswith("t-") and guard.run_id not in client.runs


async def test_declarations_reach_the_engine_through_the_run_spec():
    """Items declared as the facts: the same documents in another order, with other scores,
    bring nothing new."""
    spec = RunSpec(
        tools=(
            {
                "name": "search",
                "facts": {"path": "documents", "key": "id"},
                "volatile_fields": ["documents.*.score"],
            },
        )
    )
    guard = Guard(EmbeddedClient(), spec)
    results = [
        {"documents": [{"id": "a", "score": i}, {"id": "b", "score": -i}][:: 1 if i % 2 else -1]}
        for i in range(6)
    ]
    turns = await rounds(guard, results)
    assert turns[-1].stop is not None and turns[-1].stop.code == "no_new_facts"


async def test_a_fault_of_stallwatch_lets_that_one_call_run_and_the_next_is_judged(monkeypatch, caplog):
    """Every adapter's path: the guard's own failure never reaches the agent."""
    from stallwatch.client.run import Run

    real, failures = Run.propose, []

    async def propose_failing_once(self, tool, args, call_id=None, effect=None):
        if not failures:
            failures.append(tool)
            raise KeyError("a secret in the message")
        return await real(self, tool, args, call_id, effect)

    monkeypatch.setattr(Run, "propose", propose_failing_once)
    guard = Guard(EmbeddedClient(), RunSpec())
    decisions = []
    for _ in range(3):
        await guard.begin_model_call(["search"])
        call_id, decision = await guard.propose("search", {"q": "same"})
        decisions.append(decision)
        await guard.report(call_id, "search", True, {"docs": [1]})
    assert [d.allowed for d in decisions] == [True, True, False]
    assert "unguarded" in decisions[0].reason and decisions[2].code == "duplicate_call"
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "judging a call (KeyError at test_core.py:" in warning.getMessage()
    assert "secret" not in warning.getMessage()


async def test_a_run_that_fails_to_start_leaves_the_agent_running_and_starts_at_the_next_call(monkeypatch):
    client = EmbeddedClient()
    real, failures = type(client).start_run, []

    async def start_failing_once(self, *args, **kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("broker away")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(type(client), "start_run", start_failing_once)
    guard = Guard(client, RunSpec())
    turn = await guard.begin_model_call(["search"])
    assert turn.stop is None and turn.tools_allowed
    call_id, decision = await guard.propose("search", {"q": 1})
    assert decision.allowed and guard.run is not None  # started at this call
    await guard.report(call_id, "search", True, {"docs": [1]})
    await guard.finish("done")
