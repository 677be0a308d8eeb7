"""The broker for the stream jobs' tests: started once, only for tests marked `kafka`."""

from __future__ import annotations

import pytest

from tests.kafka_harness import kafka


@pytest.fixture(scope="session")
def broker() -> None:
    """The project's own Apache Kafka: started here when none answers (idempotent)."""
    kafka("up")


@pytest.fixture(autouse=True)
def _broker_for_kafka_tests(request: pytest.FixtureRequest) -> None:
    """Only tests marked `kafka` need the broker; the pure ones here run without it."""
    if request.node.get_closest_marker("kafka"):
        request.getfixturevalue("broker")
