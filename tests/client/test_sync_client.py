"""The client without asyncio: the same decisions through blocking calls, from any thread."""

from __future__ import annotations

import threading

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
