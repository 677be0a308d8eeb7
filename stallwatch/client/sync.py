"""The client without asyncio: a private event loop in a thread runs an EmbeddedClient or KafkaClient."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from stallwatch.client.run import CallDecision, Client, Run
from stallwatch.contract.commands import Nudge, Stop

T = TypeVar("T")


class SyncClient:
    """Every call blocks until it is done; safe to call from any thread.

    `client` is a client, or a callable that makes one (such as the class itself): a KafkaClient
    made by a callable is built inside the private loop, where its connections will live.

    With an in-process client (`runs_inline`, such as EmbeddedClient) the run's calls (`do`) run
    on the caller's thread under one lock: they never wait, so crossing to the loop thread and
    back (most of their cost) buys nothing. The lock serialises them as the loop did, and
    coroutines given to `call`/`submit` run on the loop with each step under the same lock.
    """

    def __init__(self, client: Client | Callable[[], Client] | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="stallwatch-client", daemon=True
        )  # a forgotten close() must not hang exit
        self._thread.start()
        # Reentrant: a coroutine stepped under the lock may itself use `do`.
        self._changed = threading.Condition(threading.RLock())
        self.inline = False
        self.client: Client = self.call(self._enter(client))
        self.inline = self.client.runs_inline
        self._closed = False

    async def _enter(self, client: Client | Callable[[], Client] | None) -> Client:
        if client is None:
            from stallwatch.client.embedded import EmbeddedClient

            client = EmbeddedClient
        made = client if isinstance(client, Client) else client()
        return await made.__aenter__()

    def do(self, coro: Coroutine[Any, Any, T]) -> T:
        """One of the client's own calls (a run's or an adapter's): on the caller's thread when
        the client runs inline, else on the client's loop."""
        if not self.inline:
            return self.call(coro)
        with self._changed:
            try:
                return _complete(coro)
            finally:
                self._changed.notify_all()  # wait_stopped looks again

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the client's loop; for adapters that await it from another loop."""
        return asyncio.run_coroutine_threadsafe(self._stepped(coro) if self.inline else coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and return its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("SyncClient.call from the client's own loop would wait for itself")
        return self.submit(coro).result()

    async def _stepped(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` on the loop with each of its steps under the lock, so that it never runs at the
        same time as an inline call from another thread (it may wait between steps)."""
        sent: Any = None
        error: BaseException | None = None
        while True:
            with self._changed:
                try:
                    waited_on = coro.send(sent) if error is None else coro.throw(error)
                except StopIteration as done:
                    return done.value
                finally:
                    self._changed.notify_all()
            sent, error = None, None
            try:
                sent = await _Await(waited_on)
            except BaseException as exc:  # cancelled, or the awaited future failed: passed on
                error = exc

    def start_run(
        self,
        run_id: str,
        mode: str = "researcher",
        tools: list[dict[str, Any]] | None = None,
        policy: dict[str, Any] | None = None,
        parent_run_id: str | None = None,
        tenant: str | None = None,
    ) -> SyncRun:
        run = self.do(self.client.start_run(run_id, mode, tools, policy, parent_run_id, tenant))
        return SyncRun(self, run)

    def forget(self, run_id: str) -> None:
        if self.inline:
            with self._changed:
                self.client.forget(run_id)
        else:
            self._loop.call_soon_threadsafe(self.client.forget, run_id)

    def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Inline only: wait until `done()` is true after some call, up to `timeout_s`."""
        with self._changed:
            return self._changed.wait_for(done, timeout_s)

    def close(self) -> None:
        """Stop the client, then the loop and its thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.call(self.client.__aexit__(None, None, None))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _complete(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits to its end, with no event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an inline client's call waited on something: its client must not set runs_inline")


class _Await:
    """Awaits what a stepped coroutine yielded, as if the coroutine itself had."""

    def __init__(self, waited_on: Any) -> None:
        self.waited_on = waited_on

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.waited_on)


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
        return self.client.do(self.run.start_round())

    def end_round(self) -> None:
        self.client.do(self.run.end_round())

    def propose(self, tool: str, args: Any, call_id: str | None = None) -> tuple[str, CallDecision]:
        return self.client.do(self.run.propose(tool, args, call_id))

    def result(
        self, call_id: str, tool: str, status: str = "ok", result: Any = None, send_content: bool = False
    ) -> None:
        self.client.do(self.run.result(call_id, tool, status, result, send_content))

    def end(self, reason: str | None = None) -> None:
        self.client.do(self.run.end(reason))

    def wait_stopped(self, timeout_s: float) -> bool:
        """Wait for the run's stop (on Kafka it comes a little after the round that caused it)."""
        if self.client.inline:  # a stop comes with the call that caused it, on some thread
            return self.client.wait_until(lambda: self.run.stop is not None, timeout_s)

        async def wait() -> bool:
            try:
                await asyncio.wait_for(self.run.stopped.wait(), timeout_s)
            except TimeoutError:
                return False
            return True

        return self.client.call(wait())
