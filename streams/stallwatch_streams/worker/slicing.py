"""How a batch's apply shares the worker's time with every other tenant's pipeline.

Every pipeline, commit loop, heartbeat and health answer of a worker runs on one asyncio loop.
A batch of small events is applied on the loop and lets it run every APPLY_SLICE_S: the loop
waits at most a slice and one small event's bound (docs/contract.md). One large event costs up
to tens of milliseconds in a single step that no slice can split, and a verdict of another
tenant takes several turns of the loop (its fetch, apply, send, acknowledgement and commit), each
of which would wait for such a step. A batch holding an event of at least `off_loop_event_bytes`
is therefore applied on the worker's apply thread: the interpreter hands its lock from a running
thread to a waiting one every switch interval (SWITCH_INTERVAL_S, 0.2 ms while it runs), so the
loop runs within about that of wanting to, whatever the event costs, and the cyclic collector is
paused while the thread runs (`_on_thread_run_for`). One thread serves the whole worker, so
large batches queue behind each other in THREAD_SLICE_S turns and never take more than one
thread's share of the lock. A batch's steps run one at a time either way
(`BatchApplier.steps`): its result is the same wherever it ran, and the partition's states are
touched by its own apply alone meanwhile (its commit loop reads only what earlier applies
planned).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor

from stallwatch_streams.worker.batch import BatchResult, SourceRecord

__all__ = ["APPLY_SLICE_S", "THREAD_SLICE_S", "apply_in_slices", "holds_a_large_event"]

# How long one partition's apply holds the event loop before it lets the rest of the worker run.
APPLY_SLICE_S = 0.005
# How long the apply thread runs one batch before it looks again whether the partition still
# takes it and lets another large batch have the thread.
THREAD_SLICE_S = 0.05

Steps = Generator[None, None, BatchResult]


def holds_a_large_event(records: Sequence[SourceRecord], off_loop_event_bytes: int) -> bool:
    """Whether the batch goes to the apply thread (`off_loop_event_bytes` 0: none does)."""
    if off_loop_event_bytes <= 0:
        return False
    return any(record.value is not None and len(record.value) >= off_loop_event_bytes for record in records)


async def apply_in_slices(
    steps: Steps,
    current: Callable[[], bool],
    off_loop: bool = False,
    spent: Callable[[float], None] = lambda cpu_s: None,
) -> BatchResult | None:
    """Run a batch's steps, on the loop pausing every APPLY_SLICE_S, or on the apply thread
    (`off_loop`) a THREAD_SLICE_S at a time. None when `current()` turns false at a pause.
    `spent` is told the CPU seconds of each slice (the running thread's own)."""
    loop = asyncio.get_running_loop()
    while True:
        if off_loop:
            turn = loop.run_in_executor(_apply_thread(), _on_thread_run_for, steps, THREAD_SLICE_S)
            done, result, cpu_s = await turn
        else:
            done, result, cpu_s = _run_for(steps, APPLY_SLICE_S)
        spent(cpu_s)
        if done:
            return result
        if not off_loop:
            await asyncio.sleep(0)  # the other ready tasks run before the batch goes on
        if not current():
            steps.close()
            return None


def _run_for(steps: Steps, seconds: float) -> tuple[bool, BatchResult | None, float]:
    """The batch's steps for about `seconds`: (True, result, cpu) once done, else (False, None,
    cpu), with the CPU seconds the calling thread spent on them."""
    began, cpu_began = time.perf_counter(), time.thread_time()
    while True:  # one step at least, however short the turn
        try:
            next(steps)
        except StopIteration as done:
            return True, done.value, time.thread_time() - cpu_began
        if time.perf_counter() - began >= seconds:
            return False, None, time.thread_time() - cpu_began


def _on_thread_run_for(steps: Steps, seconds: float) -> tuple[bool, BatchResult | None, float]:
    """`_run_for` with the cyclic collector paused and the interpreter's lock handed over every
    SWITCH_INTERVAL_S. A large event parses into tens of thousands of objects that live through
    the collections their own allocation sets off, so they are promoted until a full collection
    walks every object of the worker, holding the interpreter's lock from the loop for that long
    (136 ms over a million objects, measured). Paused, they die by reference count (an event's
    tree holds no cycle) and are never promoted."""
    collecting = gc.isenabled()
    interval = sys.getswitchinterval()
    gc.disable()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        return _run_for(steps, seconds)
    finally:
        sys.setswitchinterval(interval)
        if collecting:
            gc.enable()


# How long a thread that wants the interpreter's lock waits for the one holding it (Python's
# default is 5 ms). The loop lets the lock go at every socket call and waits about this to take it
# back from the apply thread, many times per verdict of another tenant: at 1 ms, A's verdict p99
# during B's flood was 2.3x its p99 alone, at 0.2 ms 1.0-1.6x (benchmarks/README.md). The apply
# thread pays a few per cent in handovers, and only while the loop wants the lock. Set only while
# the apply thread runs a turn: set for the whole worker, the group model's consumer threads would
# take the lock from the loop as often (its verdict p99 in kafka_bench.py went from 11.1 to 16.9 ms).
SWITCH_INTERVAL_S = 0.0002


@functools.cache
def _apply_thread() -> ThreadPoolExecutor:
    """The worker's one apply thread, started on its first large batch."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="stallwatch-apply")
