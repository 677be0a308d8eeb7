"""The client without asyncio: a private event loop in a thread runs an EmbeddedClient or KafkaClient."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from stallwatch.client.run import CallDecision, Client, Run
from stallwatch.contract.commands import Nudge, Stop

T = TypeVar("T")


class SyncClient:
    """Every call blocks until the private loop has done it; safe to call from any thread.

    `client` is a client, or a callable that makes one (such as the class itself): a KafkaClient
    made by a callable is built inside the private loop, where its connections will live.
    """

    def __init__(self, client: Client | Callable[[], Client] | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="stallwatch-client",
                                        daemon=True)  # a forgotten close() must not hang exit
        self._thread.start()
        self.client: Client = self.call(self._enter(client))
        self._closed = False

    async def _enter(self, client: Client | Callable[[], Client] | None) -> Client:
        if client is None:
            from stallwatch.client.embedded import EmbeddedClient
            client = EmbeddedClient
        made = client if isinstance(client, Client) else client()
        return await made.__aenter__()  # type: ignore[attr-defined]

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the client's loop; for adapters that await it from another loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and return its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("SyncClient.call from the client's own loop would wait for itself")
        return self.submit(coro).result()

    def start_run(self, run_id: str, mode: str = "researcher", tools: list[dict[str, Any]] | None = None,
                  policy: dict[str, Any] | None = None, parent_run_id: str | None = None,
                  tenant: str | None = None) -> SyncRun:
        run = self.call(self.client.start_run(run_id, mode, tools, policy, parent_run_id, tenant))
        return SyncRun(self, run)

    def forget(self, run_id: str) -> None:
        self._loop.call_soon_threadsafe(self.client.forget, run_id)

    def close(self) -> None:
        """Stop the client, then the loop and its thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.call(self.client.__aexit__(None, None, None))  # type: ignore[attr-defined]
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncRun:
    """A `Run` with blocking calls. `stop`, `nudges` and `round` read the run as it stands."""

    def __init__(self, client: SyncClient, run: Run) -> None:
        self.client = client
        self.run = run
        self.run_id = run.run_id

    @property
    def stop(self) -> Stop | None:
        return self.run.stop

    @property
    def nudges(self) -> list[Nudge]:
        return self.run.nudges

    @property
    def round(self) -> int:
        return self.run.round

    def system_prompt(self) -> str:
        return self.run.system_prompt()

    def start_round(self) -> int:
        return self.client.call(self.run.start_round())

    def end_round(self) -> None:
        self.client.call(self.run.end_round())

    def propose(self, tool: str, args: Any, call_id: str | None = None) -> tuple[str, CallDecision]:
        return self.client.call(self.run.propose(tool, args, call_id))

    def result(self, call_id: str, tool: str, status: str = "ok", result: Any = None,
               send_content: bool = False) -> None:
        self.client.call(self.run.result(call_id, tool, status, result, send_content))

    def end(self, reason: str | None = None) -> None:
        self.client.call(self.run.end(reason))

    def wait_stopped(self, timeout_s: float) -> bool:
        """Wait for the run's stop (on Kafka it comes a little after the round that caused it)."""
        async def wait() -> bool:
            try:
                await asyncio.wait_for(self.run.stopped.wait(), timeout_s)
            except TimeoutError:
                return False
            return True
        return self.client.call(wait())
