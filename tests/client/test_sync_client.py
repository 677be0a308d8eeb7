"""The client without asyncio: the same decisions through blocking calls, from any thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from stallwatch.client import EmbeddedClient, SyncClient

DOCS = {"documents": [{"id": "a"}, {"id": "b"}]}


def test_a_rewording_researcher_is_refused_then_stopped_without_asyncio():
    with SyncClient(EmbeddedClient) as client:
        run = client.start_run("s1", "researcher", [{"name": "search"}])
        allowed = []
        for i in range(8):
            run.start_round()
            call_id, decision = run.propose("search", {"q": f"wording {i}"})
            allowed.append(decision.allowed)
            if decision.allowed:
                run.result(call_id, "search", "ok", DOCS)
            run.end_round()
        assert allowed == [True] * 6 + [False] * 2
        assert run.stop is not None and run.stop.code == "no_new_facts"
        assert run.wait_stopped(0.1) and [n.detail["already_seen_streak"] for n in run.nudges] == [3]


def test_calls_from_several_threads_reach_one_run():
    with SyncClient(EmbeddedClient()) as client:
        run = client.start_run("s2", "researcher", [{"name": "search"}])
        run.start_round()
        decisions = []

        def ask(i: int) -> None:
            decisions.append(run.propose("search", {"q": i % 2})[1])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # the same two signatures asked three times each: each is allowed once
        assert sorted(d.allowed for d in decisions) == [False] * 4 + [True] * 2


def test_a_call_from_the_clients_own_loop_is_refused_rather_than_hanging():
    with SyncClient(EmbeddedClient) as client:

        async def inner() -> None:
            client.call(client.client.start_run("s3"))

        with pytest.raises(RuntimeError, match="wait for itself"):
            client.call(inner())


def test_close_stops_the_thread_and_is_idempotent():
    client = SyncClient(EmbeddedClient)
    client.close()
    client.close()
    assert not client._thread.is_alive()


def test_an_in_process_clients_calls_run_on_the_callers_thread():
    # Crossing to the loop thread and back was most of a guarded call's cost under SyncClient.
    with SyncClient(EmbeddedClient) as client:
        threads = set()
        apply = client.client._apply
        assert apply is not None

        def recording(event: dict) -> list:
            threads.add(threading.current_thread())
            return apply(event)

        client.client._apply = recording
        run = client.start_run("s4", "researcher", [{"name": "search"}])
        run.start_round()
        call_id, _ = run.propose("search", {"q": 1})
        run.result(call_id, "search", "ok", DOCS)
        run.end_round()
        assert threads == {threading.current_thread()}


def test_wait_stopped_wakes_when_another_threads_call_stops_the_run():
    with SyncClient(EmbeddedClient) as client:
        run = client.start_run("s5", "researcher", [{"name": "search"}], {"max_rounds": 2})
        woke = []
        looked = threading.Event()
        wait_until = client.wait_until

        def noting_the_first_look(done: Callable[[], bool], timeout_s: float) -> bool:
            def looking() -> bool:
                looked.set()
                return done()

            return wait_until(looking, timeout_s)

        client.wait_until = noting_the_first_look  # type: ignore[method-assign]
        waiter = threading.Thread(target=lambda: woke.append(run.wait_stopped(10)))
        waiter.start()
        # From its first look to its wait the waiter holds the lock every call takes: once it has
        # looked, the stop can only come while it waits, and must wake it.
        assert looked.wait(10)
        for _ in range(3):
            run.start_round()
            run.end_round()
        waiter.join(10)
        assert woke == [True] and run.stop is not None and run.stop.code == "round_limit"


def test_a_coroutine_that_waits_still_runs_on_the_loop():
    with SyncClient(EmbeddedClient) as client:

        async def later() -> int:
            await asyncio.sleep(0.01)  # the thing under test: a coroutine suspended on the loop's timer
            run = await client.client.start_run("s6")
            await run.start_round()
            return run.round

        assert client.call(later()) == 1


def test_an_inline_client_that_waits_is_a_clear_error():
    class Waiting(EmbeddedClient):
        async def _prepare(self, run_id: str) -> None:
            await asyncio.sleep(0)  # the thing under test: a client that yields to the loop

    with SyncClient(Waiting) as client, pytest.raises(RuntimeError, match="runs_inline"):
        client.start_run("s7")
