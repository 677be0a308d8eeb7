"""The runs a server holds: one client, one lock per run, idle runs forgotten."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from stallwatch.client.run import Client, Run
from stallwatch.contract.commands import Stop, WouldStop
from stallwatch.serve.models import RunView, StopView

# A run untouched this long is ended and forgotten: an agent that died without ending its
# session must not hold memory in a server that runs for weeks. Far longer than any pause
# inside one agent session (a user thinking between two prompts).
DEFAULT_IDLE_S = 6 * 3600.0


class UnknownRun(LookupError):
    """A request for a run the server does not hold."""


class RunExists(ValueError):
    """run_started for a run the server already holds."""


@dataclass
class Held:
    """A run and what the server keeps beside it."""

    run: Run
    last_used: float = field(default_factory=time.monotonic)
    nudges_read: int = 0
    # Per-agent bookkeeping (rounds, pending calls) kept by the hook translators.
    extra: dict[str, Any] = field(default_factory=dict)

    def unread_nudges(self, mark_read: bool = True) -> list[str]:
        fresh = self.run.nudges[self.nudges_read :]
        if mark_read:
            self.nudges_read = len(self.run.nudges)
        return [n.reason for n in fresh]


def stop_view(stop: Stop | WouldStop | None) -> StopView | None:
    return None if stop is None else StopView(code=stop.code, action=stop.action, reason=stop.reason)


class Service:
    """Every request for a run holds the run's lock: the hooks of parallel calls arrive at once,
    and a run's events must go out in the order its calls were made."""

    def __init__(
        self, client: Client, idle_s: float = DEFAULT_IDLE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`clock`: what a run's idle time and the sweep's minute are measured by."""
        self.client = client
        self.idle_s = idle_s
        self.clock = clock
        self.held: dict[str, Held] = {}
        self._locks: dict[str, list[Any]] = {}  # run id -> [its lock, requests using it]
        self._last_sweep = clock()

    @contextlib.asynccontextmanager
    async def locked(self, run_id: str) -> AsyncIterator[None]:
        """Hold the run's lock. A lock lives while a request uses it or its run is held."""
        entry = self._locks.get(run_id)
        if entry is None:
            entry = self._locks[run_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and run_id not in self.held:
                del self._locks[run_id]

    def get(self, run_id: str) -> Held:
        held = self.held.get(run_id)
        if held is None:
            raise UnknownRun(run_id)
        held.last_used = self.clock()
        return held

    async def start(self, run_id: str, **start: Any) -> Held:
        """Call with the run's lock held."""
        if run_id in self.held:
            raise RunExists(run_id)
        run = await self.client.start_run(run_id, **start)
        held = self.held[run_id] = Held(run, self.clock())
        return held

    async def end(self, run_id: str, reason: str | None = None) -> Held:
        """Call with the run's lock held: sends run_ended and forgets the run."""
        held = self.get(run_id)
        try:
            await held.run.end(reason)
        finally:
            self.forget(run_id)
        return held

    def forget(self, run_id: str) -> None:
        self.held.pop(run_id, None)
        self.client.forget(run_id)

    def view(self, held: Held, mark_read: bool = True) -> RunView:
        """The run as the API answers it; `mark_read=False` for a GET, which changes nothing."""
        run = held.run
        return RunView(
            run_id=run.run_id,
            round=run.round,
            stop=stop_view(run.stop),
            nudges=held.unread_nudges(mark_read),
            would_stop=stop_view(run.would_stop),
        )

    async def sweep(self) -> bool:
        """End the runs idle for longer than `idle_s`, at most once a minute; True when it looked."""
        now = self.clock()
        if now - self._last_sweep < 60.0:
            return False
        self._last_sweep = now
        for run_id in [r for r, h in self.held.items() if now - h.last_used > self.idle_s]:
            async with self.locked(run_id):
                if run_id in self.held:
                    await self.end(run_id, "idle")
        return True
