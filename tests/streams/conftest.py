"""The broker for the stream jobs' tests: started once, only for tests marked `kafka`."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def broker() -> None:
    """The project's own Apache Kafka: started here when none answers (idempotent)."""
    from tests.kafka_harness import kafka  # here: the pure tests of this folder never load it

    kafka("up")


@pytest.fixture(autouse=True)
def _broker_for_kafka_tests(request: pytest.FixtureRequest) -> None:
    """Only tests marked `kafka` need the broker; the pure ones here run without it."""
    if request.node.get_closest_marker("kafka"):
        request.getfixturevalue("broker")
