"""A batch's apply shares the event loop: it pauses every slice, or runs on the apply thread when
it holds a large event, so the other tenants' pipelines, the group's heartbeats and the health
answers run during a long batch and even during one long event; and it gives the same result
however and wherever it is sliced."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Generator

import pytest

from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch_streams.worker import slicing
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
    monkeypatch.setattr(slicing, "APPLY_SLICE_S", 0.0)  # a pause after every record
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
    result = await slicing.apply_in_slices(steps(batch), lambda: True)
    applying = False
    await other
    assert result is not None
    # One turn of the other task at every pause: one pause per record, the last one's included.
    assert turns >= len(batch)


async def test_a_sliced_batch_gives_the_same_result_as_one_apply(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(slicing, "APPLY_SLICE_S", 0.0)
    batch = looping_batch()
    sliced = await slicing.apply_in_slices(steps(batch), lambda: True)
    whole = BatchApplier(Detector(), "events").apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    assert sliced is not None
    assert [encode_command(c) for c in sliced.commands] == [encode_command(c) for c in whole.commands]
    assert sliced.states["r1"].to_bytes() == whole.states["r1"].to_bytes()
    assert any(c.decision == "refuse" for c in whole.commands)  # the batch does decide something


@pytest.mark.parametrize("off_loop", [False, True])
async def test_a_batch_whose_partition_moved_meanwhile_is_given_up(
    off_loop: bool, monkeypatch: pytest.MonkeyPatch
):
    """On the loop or on the apply thread, a record a turn: none is applied after the look that
    found the partition moved."""
    monkeypatch.setattr(slicing, "APPLY_SLICE_S", 0.0)
    monkeypatch.setattr(slicing, "THREAD_SLICE_S", 0.0)
    batch = looping_batch()
    looks = 0

    def current() -> bool:
        nonlocal looks
        looks += 1
        return looks < 3  # rebuilt before the third look

    assert await slicing.apply_in_slices(steps(batch), current, off_loop) is None
    assert looks == 3  # one look a record: the batch's 161 records would make 161


async def test_on_the_apply_thread_a_batch_gives_the_same_result_as_one_apply(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(slicing, "THREAD_SLICE_S", 0.0)  # back to the loop after every record
    batch = looping_batch()
    threaded = await slicing.apply_in_slices(steps(batch), lambda: True, off_loop=True)
    whole = BatchApplier(Detector(), "events").apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    assert threaded is not None
    assert [encode_command(c) for c in threaded.commands] == [encode_command(c) for c in whole.commands]
    assert threaded.states["r1"].to_bytes() == whole.states["r1"].to_bytes()


async def test_the_loop_runs_during_one_long_step_on_the_apply_thread():
    """The step cannot end until a task on the loop has run: on the loop itself it would wait out
    its deadline and fail."""
    loop_ran = threading.Event()

    def one_long_step() -> Generator[None, None, str]:
        assert threading.current_thread() is not threading.main_thread()
        assert loop_ran.wait(timeout=30), "the loop did not run while the step did"
        yield
        return "done"

    async def other_tenant() -> None:
        await asyncio.sleep(0)
        loop_ran.set()

    other = asyncio.create_task(other_tenant())
    result = await slicing.apply_in_slices(one_long_step(), lambda: True, off_loop=True)  # type: ignore[arg-type]
    await other
    assert result == "done"


def test_only_a_batch_holding_a_large_event_goes_off_the_loop():
    quiet, loud = RunScript("r1"), RunScript("r2")
    quiet.round_of(("search", {"q": 1}, {"x": "y"}))
    loud.round_of(("search", {"q": 1}, {"text": "x" * 40_000}))
    small, large = messages(quiet), messages(loud)
    assert not slicing.holds_a_large_event(small, 32 << 10)
    assert slicing.holds_a_large_event(large, 32 << 10)
    assert not slicing.holds_a_large_event(large, 0)  # 0: every batch on the loop


@pytest.mark.parametrize("off_loop", [False, True])
async def test_the_cpu_of_every_slice_is_told(off_loop: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(slicing, "APPLY_SLICE_S", 0.0)
    monkeypatch.setattr(slicing, "THREAD_SLICE_S", 0.0)
    batch = looping_batch()
    told: list[float] = []
    assert await slicing.apply_in_slices(steps(batch), lambda: True, off_loop, told.append) is not None
    assert len(told) == len(batch) + 1  # a slice a record, and the one that finds the batch done
    assert all(cpu_s >= 0 for cpu_s in told) and sum(told) > 0


async def test_on_the_apply_thread_the_collector_is_paused_and_then_as_it_was():
    seen: list[bool] = []

    def one_step() -> Generator[None, None, str]:
        seen.append(gc.isenabled())
        yield
        return "done"

    assert gc.isenabled()
    assert await slicing.apply_in_slices(one_step(), lambda: True, off_loop=True) == "done"  # type: ignore[arg-type]
    assert seen == [False] and gc.isenabled()


async def test_the_apply_thread_hands_the_lock_over_often_only_while_it_runs():
    """The short switch interval while a turn runs; the worker's own once it ends, so that its
    other threads do not take the lock from the loop as often."""
    seen: list[float] = []
    before = sys.getswitchinterval()
    assert before != slicing.SWITCH_INTERVAL_S

    def one_step() -> Generator[None, None, str]:
        seen.append(sys.getswitchinterval())
        yield
        return "done"

    assert await slicing.apply_in_slices(one_step(), lambda: True, off_loop=True) == "done"  # type: ignore[arg-type]
    assert seen == [pytest.approx(slicing.SWITCH_INTERVAL_S)] and sys.getswitchinterval() == before
