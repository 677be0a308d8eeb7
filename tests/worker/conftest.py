from __future__ import annotations

import pytest

from tests.kafka_harness import kafka


@pytest.fixture(scope="session", autouse=True)
def broker() -> None:
    """The project's own Apache Kafka: started here when none answers (idempotent)."""
    kafka("up")
