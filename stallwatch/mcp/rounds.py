"""MCP has no rounds: calls close together in time form one, and it ends after a quiet gap."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from stallwatch.client.run import Run
from stallwatch.contract.faults import fault

log = logging.getLogger(__name__)

# A model writes its next response between two rounds, which takes longer than this; a client
# running the calls of one response one after the other leaves gaps far shorter. Merging two
# rounds only delays a stop, so the gap errs long.
DEFAULT_ROUND_GAP_S = 1.0

# A pause this long with no call ends the run: the next call starts a new one. It is far
# longer than a model takes to write its next response, and short enough that a run stopped
# in one conversation does not keep refusing calls in the user's next one (MCP clients keep
# one server process across conversations).
DEFAULT_NEW_RUN_AFTER_S = 120.0


class Rounds:
    """Opens a round at a call that comes while none is open; a call that starts while another
    is in flight, or within `gap_s` of the last one ending, joins it; the round ends once nothing
    has been in flight for `gap_s`. One instance per run; calls may overlap."""

    def __init__(
        self,
        run: Run,
        gap_s: float = DEFAULT_ROUND_GAP_S,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """`sleep`: what a gap is waited out with (a test lets it run out when it chooses)."""
        self.run = run
        self.gap_s = gap_s
        self.sleep = sleep
        self.in_flight = 0
        self.open = False
        self._lock = asyncio.Lock()  # round_started and round_ended go out one at a time
        self._closer: asyncio.Task[None] | None = None

    async def call_starts(self) -> None:
        """Pair every call with one `call_ends`, even when this raises."""
        self.in_flight += 1
        async with self._lock:
            self._cancel_closer()
            if not self.open:
                self.open = True
                await self.run.start_round()

    def call_ends(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:  # any earlier closer was cancelled when this call started
            self._closer = asyncio.create_task(self._close_after_gap(), name="stallwatch-round-gap")

    async def close(self) -> None:
        """End the open round now (the session ends)."""
        async with self._lock:
            self._cancel_closer()
            await self._end_round()

    async def _close_after_gap(self) -> None:
        await self.sleep(self.gap_s)
        async with self._lock:
            if self.in_flight == 0:
                try:
                    await self._end_round()
                except Exception as exc:  # stallwatch away, or a bug: the calls go on, rounds or not
                    log.warning("stallwatch could not end round %d (%s)", self.run.round, fault(exc))

    async def _end_round(self) -> None:
        if self.open:
            self.open = False
            await self.run.end_round()

    def _cancel_closer(self) -> None:
        # Called with the lock held: the closer is asleep or waiting for the lock, never
        # half-way through sending round_ended.
        if self._closer is not None and not self._closer.done():
            self._closer.cancel()
        self._closer = None

    async def wait_closed(self) -> None:
        """For tests and shutdown: wait until a pending gap has run out."""
        if self._closer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._closer
