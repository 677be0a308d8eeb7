"""Every use of aiokafka's internals, in one place, on the objects the project builds only: its own
subclasses of aiokafka's producer, consumer and admin client, whose client, connections and
transaction sender are this module's subclasses too. aiokafka's own classes and module state are
never replaced, so that an agent runtime that uses aiokafka for its own work, in the process of the
light client, keeps a stock aiokafka (tests/client/test_stock_aiokafka.py).

What the subclasses change: a shorter wait after a refused first write of a transaction, a
JoinGroup given the time the broker may hold it, one connection lock per broker, and metadata asked
of the brokers a client is connected to first. Per instance, on objects built elsewhere (Faust's)
or for one role: a consumer's isolation level set before it starts, its fetch wait changed while it
runs, a rejoin asked for, an idempotent producer's batches that wait for a leader
(tests/kafka/test_aiokafka_patch.py fails if aiokafka changes under any of them)."""

from __future__ import annotations

import asyncio
import logging
import random
from contextvars import ContextVar
from typing import Any

import aiokafka.producer.sender as aiokafka_sender
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.cluster import ClusterMetadata
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import JoinGroupRequest
from aiokafka.protocol.metadata import MetadataRequest

log = logging.getLogger("aiokafka.client")  # the messages of the method restated below, as aiokafka logs them

# aiokafka's own value, which the sender's subclass replaces; the test checks it is still there, so
# that an aiokafka that changed its retry logic is noticed instead of silently overridden.
AIOKAFKA_BACKOFF_S = 0.02
# A new transaction's first write is refused (CONCURRENT_TRANSACTIONS) until the broker has written
# the previous one's commit markers, and aiokafka retries after a fixed 20 ms: measured, that was
# 23 ms of every back-to-back transaction. The markers take ~1-5 ms on a local broker.
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.002
# Beyond the rebalance timeout, for a slow answer: the Java client's margin (KAFKA-5570).
JOIN_GROUP_MARGIN_S = 5.0


# -- the transaction sender ------------------------------------------------------------------


class AddPartitionsToTxnHandler(aiokafka_sender.AddPartitionsToTxnHandler):
    """A transaction's first write refused with CONCURRENT_TRANSACTIONS is retried after
    CONCURRENT_TRANSACTIONS_BACKOFF_S instead of aiokafka's module-wide BACKOFF_OVERRIDE."""

    def handle_response(self, resp: Any) -> Any:
        backoff = super().handle_response(resp)
        # aiokafka returns its module's BACKOFF_OVERRIDE object for that case alone; every other
        # retry returns the producer's own retry backoff, another float object.
        return CONCURRENT_TRANSACTIONS_BACKOFF_S if backoff is aiokafka_sender.BACKOFF_OVERRIDE else backoff


class Sender(aiokafka_sender.Sender):
    """aiokafka's sender, with the handler above for a transaction's partitions."""

    async def _do_add_partitions_to_txn(self, tps: Any) -> Any:
        # aiokafka's method, restated with this module's handler (the test compares the two).
        node_id = await self._find_coordinator(
            CoordinationType.TRANSACTION, self._txn_manager.transactional_id
        )
        handler = AddPartitionsToTxnHandler(self, tps)
        return await handler.do(node_id)


# -- the client and its connections ----------------------------------------------------------


class Connection(AIOKafkaConnection):
    """A JoinGroup waits for its answer up to the group's rebalance timeout plus a margin, as in
    the Java client, whatever the request timeout. The broker holds a JoinGroup until every member
    has joined or the rebalance timeout passed; aiokafka gives it the request timeout, which the
    worker keeps short so that a frozen broker is left within seconds: a JoinGroup cut short is
    sent again and again while a slow member revokes."""

    def send(self, request: Any, expect_response: bool = True) -> Any:
        if not isinstance(request, JoinGroupRequest):
            return super().send(request, expect_response)
        usual: float = self._request_timeout  # type: ignore[has-type]  # set in aiokafka's untyped __init__
        self._request_timeout = max(usual, request._rebalance_timeout / 1000 + JOIN_GROUP_MARGIN_S)
        try:  # the timeout is read when the request is sent, not when its answer comes
            return super().send(request, expect_response)
        finally:
            self._request_timeout = usual


# The connection a client's `_get_conn` is making, for the lock it takes while making it.
_connecting: ContextVar[tuple[Any, Any] | None] = ContextVar("connecting")


class Client(AIOKafkaClient):
    """aiokafka's client with two changes for a broker that stops answering, and its connections
    made as `Connection`s.

    One connection lock per broker: a client makes its connections to different brokers at once.
    aiokafka makes them one at a time, under one lock per client: a connection to a frozen broker
    (a TCP connect, then a version request, each up to the request timeout) held every other
    connection of the client back, so a producer whose requests to the live brokers had timed out
    (a write with acks=all waits for a frozen follower until it leaves the ISR) stayed cut off from
    them too, measured for 10 s after the frozen broker's partitions had new leaders. The lock
    still keeps two connections to one broker from being made at once.

    Metadata from the connected brokers first: a frozen broker's connection closes at its first
    timed-out request; aiokafka, picking at random, then tries to connect to it again for the next
    update (a TCP connect and a version request, each up to the request timeout) while the
    partitions it led already have new leaders that the client keeps not knowing."""

    async def _get_conn(
        self, node_id: Any, *, group: Any = ConnectionGroup.DEFAULT, no_hint: bool = False
    ) -> Any:
        token = _connecting.set((node_id, group))
        try:
            conn = await super()._get_conn(node_id, group=group, no_hint=no_hint)
        finally:
            _connecting.reset(token)
        if type(conn) is AIOKafkaConnection:
            conn.__class__ = Connection  # made by aiokafka's create_conn: this module's from now on
        return conn

    @property
    def _get_conn_lock(self) -> asyncio.Lock:
        locks: dict[tuple[Any, Any] | None, asyncio.Lock] = self.__dict__.setdefault(
            "_locks_per_connection", {}
        )
        return locks.setdefault(_connecting.get(None), asyncio.Lock())

    async def _metadata_update(self, cluster_metadata: ClusterMetadata, topics: Any) -> bool:
        # aiokafka's method restated (the test compares the two), its shuffle followed by a sort
        # that puts the connected brokers first.
        assert isinstance(cluster_metadata, ClusterMetadata)
        metadata_request = MetadataRequest(list(topics) if topics else None)
        nodeids: list[Any] = [b.nodeId for b in self.cluster.brokers()]
        bootstrap_id = ("bootstrap", ConnectionGroup.DEFAULT)
        if bootstrap_id in self._conns:
            nodeids.append("bootstrap")
        random.shuffle(nodeids)
        connected = {node for (node, _), conn in self._conns.items() if conn.connected()}
        nodeids.sort(key=lambda node: node not in connected)
        for node_id in nodeids:
            conn = await self._get_conn(node_id)
            if conn is None:
                continue
            log.debug("Sending metadata request %s to node %s", metadata_request, node_id)
            try:
                metadata = await conn.send(metadata_request)
            except (TimeoutError, KafkaError) as err:
                log.warning("Unable to request metadata from node with id %s: %r", node_id, err)
                continue
            if not metadata.brokers:
                return False
            cluster_metadata.update_metadata(metadata)
            if bootstrap_id in self._conns and len(self.cluster.brokers()):
                self._conns.pop(bootstrap_id).close()
            break
        else:
            log.error("Unable to update metadata from %s", nodeids)
            cluster_metadata.failed_update(None)
            return False
        return True


def _use_project_client(client: AIOKafkaClient) -> None:
    """A client aiokafka built, inside a producer, consumer or admin client, becomes this
    module's `Client`, before it connects anywhere."""
    client.__class__ = Client


def on_project_client(consumer: AIOKafkaConsumer) -> None:
    """A consumer another library built (Faust's, for the fleet app) uses the project's client."""
    _use_project_client(consumer._client)


# -- what the project builds -----------------------------------------------------------------


class Producer(AIOKafkaProducer):
    """aiokafka's producer on the project's client, with the project's transaction sender."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        _use_project_client(self.client)
        self._sender.__class__ = Sender


class Consumer(AIOKafkaConsumer):
    """aiokafka's consumer on the project's client."""

    def __init__(self, *topics: str, **options: Any) -> None:
        super().__init__(*topics, **options)
        _use_project_client(self._client)

    def request_rejoin(self) -> None:
        request_rejoin(self)

    def set_fetch_max_wait(self, wait_ms: int) -> None:
        set_fetch_max_wait(self, wait_ms)


class AdminClient(AIOKafkaAdminClient):
    """aiokafka's admin client on the project's client."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        _use_project_client(self._client)


# -- per instance, for one role --------------------------------------------------------------


def batches_wait_for_a_leader(producer: AIOKafkaProducer) -> None:
    """An idempotent producer's batches wait for their partition's leader instead of expiring
    after request_timeout_ms with no leader known (a broker restarting). aiokafka retries an
    idempotent batch forever once sent (`Sender._can_retry`), but expires it unsent in
    `MessageAccumulator.drain_by_nodes`, after giving it its sequence numbers: a producer the
    broker holds no state for on that partition (a fresh one, as the replacement of a broken
    ahead producer) then has its next batches accepted over the gap, and they overtake the lost
    one: a run's commands out of order. The Java client bumps its epoch on an expiry instead
    (KIP-360); aiokafka does not (aio-libs/aiokafka#1017)."""
    producer._message_accumulator._batch_ttl = float("inf")


def read_committed_before_start(consumer: AIOKafkaConsumer) -> None:
    """A consumer built by another library (Faust) reads committed records only: aiokafka reads
    the isolation level at start(), from the attribute its constructor set."""
    consumer._isolation_level = "read_committed"


def set_fetch_max_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """The longest the broker holds the consumer's next fetches (`fetch_max_wait_ms`), changed
    while it runs: aiokafka reads its fetcher's copy at each fetch it builds and has no public
    setter. A consumer not started yet (no fetcher) keeps the value it was built with."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None:
        fetcher._fetch_max_wait_ms = wait_ms


def request_rejoin(consumer: AIOKafkaConsumer) -> None:
    """The consumer rejoins its group at once (the Java client's `enforceRebalance`): aiokafka's
    coordinator has the call, its consumer does not expose it. A consumer not started yet (no
    coordinator) joins anyway when it starts."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None:
        coordinator.request_rejoin()


def retrieve_transaction_failures(producer: object) -> None:
    """Mark as seen the failure a transactional producer's sender left in futures no one awaits.
    After a fatal error (a fencing), aiokafka's transaction context returns without aborting, so
    the transaction's waiter is never awaited, nor is a failed batch's drain waiter; each would
    log "Future exception was never retrieved" with a traceback when collected. The caller has
    the failure already (a send's, or the transaction's)."""
    if not isinstance(producer, AIOKafkaProducer):
        return  # a test's double: no sender
    accumulator = producer._message_accumulator
    batches = [*(b for queue in accumulator._batches.values() for b in queue), *accumulator._pending_batches]
    waiters = [batch._drain_waiter for batch in batches]
    if producer._txn_manager is not None:
        waiters.append(producer._txn_manager.wait_for_transaction_end())
    for waiter in waiters:
        if waiter is not None and waiter.done() and not waiter.cancelled():
            waiter.exception()
