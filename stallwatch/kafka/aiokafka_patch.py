"""Every use of aiokafka's internals, in one place: a shorter wait after a refused first write of
a transaction, a consumer's fetch wait changed while it runs, and a JoinGroup given the time the
broker may hold it (tests/kafka/test_aiokafka_patch.py fails if aiokafka changes under any of
them)."""

from __future__ import annotations

from typing import Any

import aiokafka.producer.sender
from aiokafka import AIOKafkaConsumer
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


def set_fetch_max_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """The longest the broker holds the consumer's next fetches (`fetch_max_wait_ms`), changed
    while it runs: aiokafka reads its fetcher's copy at each fetch it builds and has no public
    setter. A consumer not started yet (no fetcher) keeps the value it was built with."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None:
        fetcher._fetch_max_wait_ms = wait_ms


# Beyond the rebalance timeout, for a slow answer: the Java client's margin (KAFKA-5570).
JOIN_GROUP_MARGIN_S = 5.0
_send_with_request_timeout = AIOKafkaConnection.send


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

