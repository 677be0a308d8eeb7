"""Calls to a broker that is away, tried again until it answers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError, ProducerFenced

log = logging.getLogger(__name__)

# The first wait, doubled up to the last.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0

T = TypeVar("T")


class Abandoned(Exception):
    """A call no longer wanted (`until_done`'s `unless`) before it was tried again."""


async def until_done(attempt: Callable[[], Awaitable[T]], unless: Callable[[], bool] | None = None) -> T:
    """Retry a call while the broker is away (connection refused, timeouts); a worker waiting
    here makes no progress, so the stall timeout still bounds it. With `unless`, asked before
    each try after the first: true, the call is given up (`Abandoned`)."""
    wait, failures, since = RETRY_FIRST_S, 0, time.monotonic()
    while True:
        if failures and unless is not None and unless():
            raise Abandoned(f"given up after {failures} tries")
        try:
            result = await attempt()
        except ProducerFenced:
            raise
        except (KafkaError, OSError) as exc:
            # One line when it starts and one when it ends: a 30 s outage retried every 5 s
            # would otherwise add a line per attempt to the folded Kafka summary.
            failures += 1
            say = log.warning if failures == 1 else log.debug
            say("the broker did not answer (%r); trying again every %.0f s at most", exc, RETRY_MAX_S)
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_MAX_S)
            continue
        if failures:
            log.info(
                "the broker answered after %d attempts in %.0f s", failures + 1, time.monotonic() - since
            )
        return result
