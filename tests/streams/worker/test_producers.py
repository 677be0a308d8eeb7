"""Starting a partition's producer while the broker comes back, without a broker: a start that
aiokafka fails with an assertion (metadata naming no broker yet) is retried like a broker that
does not answer, and the producer it made is stopped."""

from __future__ import annotations

import pytest
from aiokafka.errors import KafkaConnectionError

from stallwatch_streams.worker import producers, retry
from stallwatch_streams.worker.retry import until_done


class Starting:
    """A producer whose first `failures` starts fail as aiokafka's does when the bootstrap's
    metadata named no broker."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.starts = self.stops = 0

    async def start(self) -> None:
        self.starts += 1
        if self.starts <= self.failures:
            raise AssertionError("Did we not perform bootstrap?")

    async def stop(self) -> None:
        self.stops += 1


async def test_a_start_on_a_cluster_that_names_no_broker_yet_is_a_connection_error() -> None:
    producer = Starting(failures=1)
    with pytest.raises(KafkaConnectionError, match="named no broker yet"):
        await producers._started(producer)  # type: ignore[arg-type]
    assert producer.stops == 1  # its connections closed


async def test_it_is_retried_until_the_broker_names_itself(monkeypatch) -> None:
    monkeypatch.setattr(retry, "RETRY_FIRST_S", 0.0)
    producer = Starting(failures=2)
    started = await until_done(lambda: producers._started(producer))  # type: ignore[arg-type]
    assert started is producer and producer.starts == 3 and producer.stops == 2
