from __future__ import annotations

import random
import socket
from collections.abc import AsyncIterator

import pytest

from stallwatch.settings import Settings
from tests.kafka_harness import WorkerProcess, kafka, serving_worker


@pytest.fixture(scope="session", autouse=True)
def broker() -> None:
    """The project's own Apache Kafka: started here when none answers (idempotent)."""
    kafka("up")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
async def worker_settings() -> AsyncIterator[Settings]:
    """One `stallwatch worker` on topics of its own for the module's runs."""
    # The harness numbers the worker's web and metrics ports (port, port + 1000) from a fixed
    # start; on a machine shared with other test sessions those can be taken. Start from free ones.
    port = random.randrange(20000, 30000)
    while not (_free(port) and _free(port + 1000)):
        port += 1
    WorkerProcess._next_port = port - 1
    async with serving_worker(partitions=4) as (settings, _):
        yield settings
