"""Every use of aiokafka's internals, in one place: a shorter wait after a refused first write of
a transaction, a consumer's fetch wait changed while it runs, a JoinGroup given the time the
broker may hold it, one connection lock per broker, and metadata asked of the brokers a client is
connected to first (tests/kafka/test_aiokafka_patch.py fails if aiokafka changes under any of
them)."""

from __future__ import annotations

import asyncio
import functools
import random
from contextvars import ContextVar
from typing import Any

import aiokafka.client
import aiokafka.producer.sender
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.group import JoinGroupRequest

# aiokafka's own value, which the patch replaces; the test checks it is still there, so that an
# aiokafka that changed its retry logic is noticed instead of silently patched.
AIOKAFKA_BACKOFF_S = 0.02
# A new transaction's first write is refused (CONCURRENT_TRANSACTIONS) until the broker has written
# the previous one's commit markers, and aiokafka retries after a fixed 20 ms: measured, that was
# 23 ms of every back-to-back transaction. The markers take ~1-5 ms on a local broker.
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.002


def shorten_concurrent_transactions_backoff() -> None:
    """Set aiokafka's module-level retry wait for CONCURRENT_TRANSACTIONS on a transaction's first
    partition (read at each retry by AddPartitionsToTxnHandler.handle_response). Process-wide and
    idempotent: every transactional producer of the process retries that soon."""
    aiokafka.producer.sender.BACKOFF_OVERRIDE = CONCURRENT_TRANSACTIONS_BACKOFF_S


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


# Beyond the rebalance timeout, for a slow answer: the Java client's margin (KAFKA-5570).
JOIN_GROUP_MARGIN_S = 5.0
_send_with_request_timeout = AIOKafkaConnection.send


@functools.wraps(_send_with_request_timeout)
def _send(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
    if not isinstance(request, JoinGroupRequest):
        return _send_with_request_timeout(self, request, expect_response)
    usual = self._request_timeout
    self._request_timeout = max(usual, request._rebalance_timeout / 1000 + JOIN_GROUP_MARGIN_S)
    try:  # the timeout is read when the request is sent, not when its answer comes
        return _send_with_request_timeout(self, request, expect_response)
    finally:
        self._request_timeout = usual


def join_group_waits_for_the_rebalance() -> None:
    """A JoinGroup waits for its answer up to the group's rebalance timeout plus a margin, as in
    the Java client, whatever the request timeout. The broker holds a JoinGroup until every member
    has joined or the rebalance timeout passed; aiokafka gives it the request timeout, which the
    worker keeps short so that a frozen broker is left within seconds: a JoinGroup cut short is
    sent again and again while a slow member revokes. Process-wide and idempotent."""
    AIOKafkaConnection.send = _send


# The connection a client's `_get_conn` is making, for the lock it takes while making it.
_connecting: ContextVar[tuple[Any, Any] | None] = ContextVar("connecting")
_connect_holding_one_lock = AIOKafkaClient._get_conn


@functools.wraps(_connect_holding_one_lock)
async def _get_conn(
    self: AIOKafkaClient, node_id: Any, *, group: Any = ConnectionGroup.DEFAULT, no_hint: bool = False
) -> Any:
    token = _connecting.set((node_id, group))
    try:
        return await _connect_holding_one_lock(self, node_id, group=group, no_hint=no_hint)
    finally:
        _connecting.reset(token)


def _lock_of_the_connection(self: AIOKafkaClient) -> asyncio.Lock:
    locks: dict[tuple[Any, Any] | None, asyncio.Lock] = self.__dict__.setdefault("_locks_per_connection", {})
    return locks.setdefault(_connecting.get(None), asyncio.Lock())


def one_connection_lock_per_broker() -> None:
    """A client makes its connections to different brokers at once. aiokafka makes them one at a
    time, under one lock per client: a connection to a frozen broker (a TCP connect, then a
    version request, each up to the request timeout) held every other connection of the client
    back, so a producer whose requests to the live brokers had timed out (a write with acks=all
    waits for a frozen follower until it leaves the ISR) stayed cut off from them too, measured
    for 10 s after the frozen broker's partitions had new leaders. The lock still keeps two
    connections to one broker from being made at once. Process-wide and idempotent."""
    AIOKafkaClient._get_conn = _get_conn
    AIOKafkaClient._get_conn_lock = property(_lock_of_the_connection)


# The brokers a client holds an open connection to, while it picks whom to ask for metadata.
_connected: ContextVar[frozenset[Any]] = ContextVar("connected", default=frozenset())


class _ConnectedFirst:
    """aiokafka.client's `random`: its metadata update shuffles the brokers and asks each in turn
    until one answers; this shuffle puts first those the client is connected to."""

    def shuffle(self, node_ids: list[Any]) -> None:
        random.shuffle(node_ids)
        connected = _connected.get()
        node_ids.sort(key=lambda node: node not in connected)

    def __getattr__(self, name: str) -> Any:
        return getattr(random, name)


_update_metadata_from_any = AIOKafkaClient._metadata_update


@functools.wraps(_update_metadata_from_any)
async def _update_metadata_connected_first(self: AIOKafkaClient, cluster_metadata: Any, topics: Any) -> Any:
    token = _connected.set(frozenset(node for (node, _), conn in self._conns.items() if conn.connected()))
    try:
        return await _update_metadata_from_any(self, cluster_metadata, topics)
    finally:
        _connected.reset(token)


def metadata_from_connected_brokers_first() -> None:
    """A client asks the brokers it is connected to for metadata before the others. A frozen
    broker's connection closes at its first timed-out request; aiokafka, picking at random, then
    tries to connect to it again for the next update (a TCP connect and a version request, each up
    to the request timeout) while the partitions it led already have new leaders that the client
    keeps not knowing. Process-wide and idempotent."""
    aiokafka.client.random = _ConnectedFirst()
    AIOKafkaClient._metadata_update = _update_metadata_connected_first


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
