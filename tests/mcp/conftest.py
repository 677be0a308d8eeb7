from __future__ import annotations

import pytest

from tests.kafka_harness import kafka


@pytest.fixture(scope="session")
def broker() -> None:
    """The project's own Apache Kafka, for the tests that ask for it (idempotent)."""
    kafka("up")
