"""A batch's apply shares the event loop: it pauses every slice, so the other tenants' pipelines,
the group's heartbeats and the health answers run during a long batch, and gives the same
result however it is sliced."""

from __future__ import annotations

import asyncio

import pytest

from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch_streams.worker import commit
from stallwatch_streams.worker.batch import BatchApplier
from tests.script import RunScript
from tests.streams.worker.test_batch import messages


def looping_batch(rounds: int = 40):
    script = RunScript("r1")
    for n in range(rounds):
        script.start_round()
        script.call("search", {"q": n % 3}, status="ok", result={"items": [n % 2]})
        script.end_round()
    return messages(script)


def steps(batch):
    return BatchApplier(Detector(), "events").steps(batch, lambda run_id: None, PartitionClock(), 0.0)


async def test_other_work_runs_between_the_records_of_a_long_batch(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(commit, "APPLY_SLICE_S", 0.0)  # a pause after every record
    batch = looping_batch()
    applying = True
    turns = 0

    async def other_tenant() -> None:
        nonlocal turns
        while applying:
            turns += 1
            await asyncio.sleep(0)  # a turn of the loop: what the test counts

    other = asyncio.create_task(other_tenant())
    await asyncio.sleep(0)  # the other task is running, waiting for its next turn
    result = await commit.apply_in_slices(steps(batch), lambda: True)
    applying = False
    await other
    assert result is not None
    # One turn of the other task at every pause: one pause per record, the last one's included.
    assert turns >= len(batch)


async def test_a_sliced_batch_gives_the_same_result_as_one_apply(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(commit, "APPLY_SLICE_S", 0.0)
    batch = looping_batch()
    sliced = await commit.apply_in_slices(steps(batch), lambda: True)
    whole = BatchApplier(Detector(), "events").apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    assert sliced is not None
    assert [encode_command(c) for c in sliced.commands] == [encode_command(c) for c in whole.commands]
    assert sliced.states["r1"].to_bytes() == whole.states["r1"].to_bytes()
    assert any(c.decision == "refuse" for c in whole.commands)  # the batch does decide something


async def test_a_batch_whose_partition_moved_meanwhile_is_given_up(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(commit, "APPLY_SLICE_S", 0.0)
    batch = looping_batch()
    loaded: list[str] = []
    pauses = 0

    def current() -> bool:
        nonlocal pauses
        pauses += 1
        return pauses < 3  # rebuilt during the third pause

    def load(run_id: str):
        loaded.append(run_id)

    applier = BatchApplier(Detector(), "events")
    result = await commit.apply_in_slices(applier.steps(batch, load, PartitionClock(), 0.0), current)
    assert result is None
    assert pauses == 3  # no record applied after the pause that found it moved
