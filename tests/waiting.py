"""Waiting on what a test expects (a process's state, a log line, a count), never on the clock
alone: a condition polled until it holds, within a deadline generous for a busy machine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# How often a condition is looked at: often enough to see it at once, rarely enough to cost nothing.
POLL_S = 0.01

# What a wait says when it fails: a string, or one made at the deadline (a process's log tail).
What = str | Callable[[], str]


def _said(what: What) -> str:
    return what() if callable(what) else what


def wait_until(condition: Callable[[], T], timeout_s: float, what: What, interval_s: float = POLL_S) -> T:
    """The condition's first true value, looked at every `interval_s`; AssertionError naming
    `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {_said(what)}")
        time.sleep(interval_s)
    return value


async def until(
    condition: Callable[[], T | Awaitable[T]], timeout_s: float, what: What, interval_s: float = POLL_S
) -> T:
    """`wait_until` on the event loop: the loop's other tasks run between looks. `condition`
    may be a coroutine function; an exception it raises (an assertion that a process is still
    alive) ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {_said(what)}")
        await asyncio.sleep(interval_s)
