from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def broker() -> None:
    """The project's own Apache Kafka, for the tests that ask for it (idempotent)."""
    from tests.kafka_harness import kafka  # here: the pure tests of this folder never load it

    kafka("up")
