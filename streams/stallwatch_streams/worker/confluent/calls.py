"""The thread a librdkafka producer's blocking calls run on, and the bound on how long the loop
waits for one.

librdkafka gives each transactional call a timeout, but `send_offsets_to_transaction` can block
long past it once the group's coordinator is lost (docs/decisions.md, "A broker fails"), and a
blocked call cannot be cancelled. So the loop waits for a call its own timeout and WEDGED_AFTER_S
more; a call still out by then is left to its thread (a daemon's: it holds nothing at the
process's exit), and its caller replaces the producer and the thread (`CallWedged`).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

# How long past its own timeout a call may take before its producer counts as wedged.
WEDGED_AFTER_S = 2.0


class CallWedged(Exception):
    """A blocking call did not return within its timeout and WEDGED_AFTER_S."""


_Call = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class CallThread:
    """One daemon thread making blocking calls, one at a time, in order."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, call: Callable[[], Any], timeout_s: float) -> Any:
        """`call`'s result, or its error; CallWedged once it took `timeout_s` and WEDGED_AFTER_S
        (it goes on on the thread, its outcome unread, and this thread takes no more calls)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        done.add_done_callback(_read)  # an outcome its waiter no longer waits for is not logged
        self._calls.put((call, loop, done))
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout_s + WEDGED_AFTER_S)
        except TimeoutError as exc:
            self.stop()
            waited = timeout_s + WEDGED_AFTER_S
            raise CallWedged(f"a call of {self._thread.name} still out after {waited:.1f} s") from exc

    def stop(self) -> None:
        """The thread ends once the calls queued before this one are made."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (queued := self._calls.get()) is not None:
            call, loop, done = queued
            try:
                outcome: tuple[Any, BaseException | None] = (call(), None)
            except BaseException as exc:
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # the loop closed while the call was out
                loop.call_soon_threadsafe(settle, done, *outcome)


def settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """`done` given its outcome, unless it has one (its waiter gave up)."""
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


def _read(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()
