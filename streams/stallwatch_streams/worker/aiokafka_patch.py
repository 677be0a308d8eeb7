"""Every use of aiokafka's internals, in one place: a shorter wait after a refused first write of
a transaction, and a consumer's fetch wait changed while it runs
(tests/streams/worker/test_aiokafka_patch.py fails if aiokafka changes under either)."""

from __future__ import annotations

import aiokafka.producer.sender
from aiokafka import AIOKafkaConsumer

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
