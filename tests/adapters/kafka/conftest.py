from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from stallwatch.settings import Settings
from tests.kafka_harness import kafka, serving_worker


@pytest.fixture(scope="session", autouse=True)
def broker() -> None:
    """The project's own Apache Kafka: started here when none answers (idempotent)."""
    kafka("up")


@pytest.fixture(scope="module")
async def worker_settings() -> AsyncIterator[Settings]:
    """One `stallwatch worker` on topics of its own for the module's runs."""
    async with serving_worker(partitions=4) as (settings, _):
        yield settings
