"""ensure_topics' patience with a cluster that answers but has no broker ready: asked again
while it lasts, a SetupError naming the address when it does not end."""

from __future__ import annotations

import pytest
from aiokafka.errors import NodeNotReadyError

from stallwatch.kafka.topics import until_ready
from stallwatch.settings import Settings, SetupError


class FencedFor:
    """An admin call as aiokafka makes it right after a broker's pause: the metadata lists no
    broker `times` times (NodeNotReadyError, node id None), then the call is answered."""

    def __init__(self, times: int) -> None:
        self.times, self.calls = times, 0

    async def __call__(self) -> list[str]:
        self.calls += 1
        if self.calls <= self.times:
            raise NodeNotReadyError("Attempt to send a request to node which is not ready (node id None).")
        return ["stallwatch.events"]


async def test_a_broker_fenced_for_a_moment_is_asked_again_until_it_answers():
    call = FencedFor(times=3)
    assert await until_ready(Settings(), call, wait_s=5.0) == ["stallwatch.events"]
    assert call.calls == 4


async def test_a_broker_never_ready_ends_in_a_setup_error_naming_the_address():
    settings = Settings(bootstrap="10.1.2.3:9092")
    with pytest.raises(SetupError, match=r"10\.1\.2\.3:9092 answers but had no broker ready"):
        await until_ready(settings, FencedFor(times=1_000), wait_s=0.3)
