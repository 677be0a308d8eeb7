"""The one patch of aiokafka's internals still does what it says: fails if aiokafka changes under it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import aiokafka.conn
import aiokafka.consumer.fetcher as fetcher
import aiokafka.producer.sender as sender
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import ConcurrentTransactions
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from stallwatch.kafka.aiokafka_patch import (
    AIOKAFKA_BACKOFF_S,
    CONCURRENT_TRANSACTIONS_BACKOFF_S,
    JOIN_GROUP_MARGIN_S,
    join_group_waits_for_the_rebalance,
    set_fetch_max_wait,
    shorten_concurrent_transactions_backoff,
)


def test_aiokafka_still_has_the_value_the_patch_replaces():
    assignments = {target.id: node.value for node in ast.parse(inspect.getsource(sender)).body
                   if isinstance(node, ast.Assign) for target in node.targets
                   if isinstance(target, ast.Name)}
    assert ast.literal_eval(assignments["BACKOFF_OVERRIDE"]) == AIOKAFKA_BACKOFF_S


def test_a_refused_first_write_of_a_transaction_is_retried_after_the_patched_wait():
    shorten_concurrent_transactions_backoff()
    txn_manager = SimpleNamespace(txn_partitions=set())  # the transaction's first write
    fake_sender = SimpleNamespace(_txn_manager=txn_manager)
    handler = sender.AddPartitionsToTxnHandler.__new__(sender.AddPartitionsToTxnHandler)
    handler._sender = fake_sender
    handler._default_backoff = 0.1
    response = SimpleNamespace(errors=[("t", [(0, ConcurrentTransactions.errno)])])
    assert handler.handle_response(response) == CONCURRENT_TRANSACTIONS_BACKOFF_S


def test_the_fetch_wait_set_on_a_running_consumer_is_the_one_its_fetch_requests_carry():
    # The fetcher keeps its own copy of fetch_max_wait_ms and builds each fetch request from it.
    init = inspect.getsource(fetcher.Fetcher.__init__)
    assert "self._fetch_max_wait_ms = fetch_max_wait_ms" in init
    assert "self._fetch_max_wait_ms" in inspect.getsource(fetcher.Fetcher._get_actions_per_node)
    consumer = SimpleNamespace(_fetcher=SimpleNamespace(_fetch_max_wait_ms=500))
    set_fetch_max_wait(consumer, 5)  # type: ignore[arg-type]
    assert consumer._fetcher._fetch_max_wait_ms == 5


async def test_a_join_group_waits_for_the_rebalance_timeout_and_other_requests_for_the_request_timeout(
        monkeypatch):
    # aiokafka reads the connection's request timeout when it sends a request.
    assert "wait_for(fut, self._request_timeout)" in inspect.getsource(AIOKafkaConnection.send)
    join_group_waits_for_the_rebalance()
    conn = AIOKafkaConnection("127.0.0.1", 1, request_timeout_ms=5_000)
    conn._writer = SimpleNamespace(write=lambda data: None)  # type: ignore[assignment]
    conn._versions = {11: (0, 5), 13: (0, 3)}
    waits: list[float] = []
    monkeypatch.setattr(aiokafka.conn, "wait_for", lambda fut, timeout: waits.append(timeout))
    conn.send(JoinGroupRequest("g", 6_000, 6_000, "", None, "consumer", []))
    conn.send(LeaveGroupRequest("g", "m"))
    assert waits == [6.0 + JOIN_GROUP_MARGIN_S, 5.0]
    assert conn._request_timeout == 5.0


# aiokafka's documented modules; everything else of it is internal.
PUBLIC = {"aiokafka", "aiokafka.abc", "aiokafka.admin", "aiokafka.errors", "aiokafka.structs",
          "aiokafka.partitioner", "aiokafka.helpers"}
PATCH = Path(inspect.getfile(join_group_waits_for_the_rebalance)).resolve()


def test_aiokafka_internals_are_imported_by_the_patch_module_alone():
    root = Path(__file__).resolve().parents[2]
    outside = []
    for path in [*root.joinpath("stallwatch").rglob("*.py"), *root.joinpath("streams").rglob("*.py")]:
        if path.resolve() == PATCH:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            outside += [f"{path.relative_to(root)}: {name}" for name in names
                        if name.split(".")[0] == "aiokafka" and name not in PUBLIC]
    assert outside == []
