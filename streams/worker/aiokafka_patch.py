"""The one change made to aiokafka's internals: a shorter wait after a refused first write of a
transaction (tests/streams/worker/test_aiokafka_patch.py fails if aiokafka changes under it)."""

from __future__ import annotations

import aiokafka.producer.sender

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
