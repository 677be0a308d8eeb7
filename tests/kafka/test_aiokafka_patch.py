"""The project's aiokafka subclasses and per-instance changes still do what they say: fail if aiokafka
changes under them."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
from pathlib import Path
from types import SimpleNamespace

import aiokafka.client
import aiokafka.conn
import aiokafka.consumer.fetcher as fetcher
import aiokafka.producer.sender as sender
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import ConcurrentTransactions
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from stallwatch.kafka import aiokafka_patch
from stallwatch.kafka.aiokafka_patch import (
    AIOKAFKA_BACKOFF_S,
    CONCURRENT_TRANSACTIONS_BACKOFF_S,
    JOIN_GROUP_MARGIN_S,
    AddPartitionsToTxnHandler,
    Client,
    Connection,
    Producer,
    batches_wait_for_a_leader,
    set_fetch_max_wait,
)
from tests.source import parse


def test_aiokafka_still_has_the_value_the_patch_replaces():
    assignments = {
        target.id: node.value
        for node in parse(inspect.getsource(sender)).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert ast.literal_eval(assignments["BACKOFF_OVERRIDE"]) == AIOKAFKA_BACKOFF_S


def _add_partitions_handler(txn_partitions: set[TopicPartition]) -> AddPartitionsToTxnHandler:
    handler = AddPartitionsToTxnHandler.__new__(AddPartitionsToTxnHandler)
    handler._sender = SimpleNamespace(_txn_manager=SimpleNamespace(txn_partitions=txn_partitions))
    handler._default_backoff = 0.1
    return handler


def test_a_refused_first_write_of_a_transaction_is_retried_after_the_shorter_wait():
    refused = SimpleNamespace(errors=[("t", [(0, ConcurrentTransactions.errno)])])
    assert _add_partitions_handler(set()).handle_response(refused) == CONCURRENT_TRANSACTIONS_BACKOFF_S
    # A later write of the transaction, refused alike, keeps the producer's own backoff.
    assert _add_partitions_handler({TopicPartition("t", 1)}).handle_response(refused) == 0.1
    assert sender.BACKOFF_OVERRIDE == AIOKAFKA_BACKOFF_S  # aiokafka's own, for every other producer


async def test_the_projects_producer_sends_a_transactions_partitions_with_the_shorter_wait():
    producer = Producer(bootstrap_servers="127.0.0.1:1", transactional_id="t")
    assert isinstance(producer._sender, aiokafka_patch.Sender)
    assert isinstance(producer.client, Client)
    assert producer._sender.client is producer.client
    stock = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="t")
    assert type(stock._sender) is sender.Sender and type(stock.client) is AIOKafkaClient


# aiokafka's methods the project's subclasses restate, as aiokafka 0.14 has them: a change in
# aiokafka fails here, so that the restatement is read again beside the new code.
RESTATED = {
    "AIOKafkaClient._metadata_update": (AIOKafkaClient._metadata_update, "06dc51ed3e0d38b8"),
    "Sender._do_add_partitions_to_txn": (sender.Sender._do_add_partitions_to_txn, "b1330b91841c22ea"),
}


def test_the_methods_the_subclasses_restate_are_still_aiokafkas_as_restated():
    changed = [
        name
        for name, (method, digest) in RESTATED.items()
        if hashlib.sha256(inspect.getsource(method).encode()).hexdigest()[:16] != digest
    ]
    assert changed == [], "aiokafka changed these: restate them in stallwatch/kafka/aiokafka_patch.py"


def test_the_fetch_wait_set_on_a_running_consumer_is_the_one_its_fetch_requests_carry():
    # The fetcher keeps its own copy of fetch_max_wait_ms and builds each fetch request from it.
    init = inspect.getsource(fetcher.Fetcher.__init__)
    assert "self._fetch_max_wait_ms = fetch_max_wait_ms" in init
    assert "self._fetch_max_wait_ms" in inspect.getsource(fetcher.Fetcher._get_actions_per_node)
    consumer = SimpleNamespace(_fetcher=SimpleNamespace(_fetch_max_wait_ms=500))
    set_fetch_max_wait(consumer, 5)  # type: ignore[arg-type]
    assert consumer._fetcher._fetch_max_wait_ms == 5


async def test_a_join_group_waits_for_the_rebalance_timeout_and_other_requests_for_the_request_timeout(
    monkeypatch,
):
    # aiokafka reads the connection's request timeout when it sends a request.
    assert "wait_for(fut, self._request_timeout)" in inspect.getsource(
        inspect.unwrap(AIOKafkaConnection.send)
    )
    conn = Connection("127.0.0.1", 1, request_timeout_ms=5_000)
    conn._writer = SimpleNamespace(write=lambda data: None)  # type: ignore[assignment]
    conn._versions = {11: (0, 5), 13: (0, 3)}
    waits: list[float] = []
    monkeypatch.setattr(aiokafka.conn, "wait_for", lambda fut, timeout: waits.append(timeout))
    conn.send(JoinGroupRequest("g", 6_000, 6_000, "", None, "consumer", []))
    conn.send(LeaveGroupRequest("g", "m"))
    assert waits == [6.0 + JOIN_GROUP_MARGIN_S, 5.0]
    assert conn._request_timeout == 5.0


# aiokafka's documented modules; everything else of it is internal.
PUBLIC = {
    "aiokafka",
    "aiokafka.abc",
    "aiokafka.admin",
    "aiokafka.errors",
    "aiokafka.structs",
    "aiokafka.partitioner",
    "aiokafka.helpers",
}
PATCH = Path(inspect.getfile(aiokafka_patch)).resolve()


def test_aiokafka_internals_are_imported_by_the_patch_module_alone():
    root = Path(__file__).resolve().parents[2]
    outside = []
    packages = (root / "stallwatch", root / "streams" / "stallwatch_streams")
    for path in [path for package in packages for path in package.rglob("*.py")]:
        if path.resolve() == PATCH:
            continue
        for node in ast.walk(parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            outside += [
                f"{path.relative_to(root)}: {name}"
                for name in names
                if name.split(".")[0] == "aiokafka" and name not in PUBLIC
            ]
    assert outside == []


def _client_of(brokers: list[int]) -> Client:
    client = Client(bootstrap_servers="127.0.0.1:1")
    client.cluster.broker_metadata = lambda node: SimpleNamespace(host="127.0.0.1", port=node)  # type: ignore[method-assign]
    client.cluster.brokers = lambda: [SimpleNamespace(nodeId=n) for n in brokers]  # type: ignore[method-assign]
    return client


async def test_a_connection_to_a_broker_that_does_not_answer_holds_back_no_other(monkeypatch):
    # aiokafka makes a connection under the lock the patch makes per broker.
    assert "async with self._get_conn_lock:" in inspect.getsource(inspect.unwrap(AIOKafkaClient._get_conn))
    frozen, dialling = asyncio.Event(), asyncio.Event()

    async def create_conn(host: str, port: int, **options: object) -> object:
        if port == 1:
            dialling.set()
            await frozen.wait()  # a broker that never answers
        return SimpleNamespace(connected=lambda: True)

    monkeypatch.setattr(aiokafka.client, "create_conn", create_conn)
    client = _client_of([1, 2])
    to_frozen = asyncio.create_task(client._get_conn(1))
    await asyncio.wait_for(dialling.wait(), 10.0)  # the frozen broker's connection is under way
    assert await asyncio.wait_for(client._get_conn(2), 1.0) is not None
    assert not to_frozen.done()  # the frozen one still waits, alone
    frozen.set()
    assert await to_frozen is await client._get_conn(1)  # one connection per broker


async def test_metadata_is_asked_of_a_connected_broker_before_the_others():
    client = _client_of([1, 2, 3, 4])
    client._conns = {
        (3, ConnectionGroup.DEFAULT): SimpleNamespace(connected=lambda: True),
        (1, ConnectionGroup.DEFAULT): SimpleNamespace(connected=lambda: False),
    }
    asked: list[int] = []

    async def get_conn(node: int, **options: object) -> None:
        asked.append(node)  # none answers: each is asked in turn

    client._get_conn = get_conn  # type: ignore[method-assign]
    for _ in range(20):
        asked.clear()
        await client._metadata_update(client.cluster, [])
        assert asked[0] == 3 and sorted(asked) == [1, 2, 3, 4]


def test_the_isolation_level_set_before_start_is_the_one_the_fetcher_is_built_with():
    from aiokafka import AIOKafkaConsumer

    from stallwatch.kafka.aiokafka_patch import read_committed_before_start

    assert "isolation_level=self._isolation_level" in inspect.getsource(
        inspect.unwrap(AIOKafkaConsumer.start)
    )
    consumer = SimpleNamespace(_isolation_level="read_uncommitted")
    read_committed_before_start(consumer)  # type: ignore[arg-type]
    assert consumer._isolation_level == "read_committed"


async def test_an_ahead_producers_batches_wait_for_a_leader_instead_of_expiring():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", enable_idempotence=True)
    accumulator = producer._message_accumulator
    batches_wait_for_a_leader(producer)
    batch = accumulator._append_batch(accumulator.create_builder(), TopicPartition("t", 0))
    batch._ctime -= 3600  # an hour with no leader
    assert not batch.expired()


async def test_the_projects_clients_make_the_projects_connections_and_aiokafkas_make_their_own(monkeypatch):
    async def create_conn(host: str, port: int, **options: object) -> AIOKafkaConnection:
        return AIOKafkaConnection(host, port, request_timeout_ms=5_000)  # not connected: never sent on

    monkeypatch.setattr(aiokafka.client, "create_conn", create_conn)
    assert type(await _client_of([2])._get_conn(2)) is Connection
    stock = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
    stock.cluster.broker_metadata = lambda node: SimpleNamespace(host="127.0.0.1", port=node)  # type: ignore[method-assign]
    assert type(await stock._get_conn(2)) is AIOKafkaConnection


async def test_the_projects_consumer_and_admin_client_are_on_the_projects_client():
    assert type(aiokafka_patch.Consumer(bootstrap_servers="127.0.0.1:1")._client) is Client
    assert type(aiokafka_patch.AdminClient(bootstrap_servers="127.0.0.1:1")._client) is Client
