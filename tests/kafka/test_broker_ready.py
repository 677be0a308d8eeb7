"""ensure_topics' patience with a cluster that answers but has no broker ready: asked again
while it lasts, a SetupError naming the address when it does not end."""

from __future__ import annotations

import pytest
from aiokafka.errors import NodeNotReadyError, TopicAuthorizationFailedError

from stallwatch.kafka.topics import until_ready
from stallwatch.settings import Settings, SetupError


class FencedFor:
    """An admin call as aiokafka makes it right after a broker's pause: the metadata lists no
    broker `times` times (NodeNotReadyError, node id None), then the call is answered."""

    def __init__(self, times: int, node: str = "None") -> None:
        self.times, self.node, self.calls = times, node, 0

    async def __call__(self) -> list[str]:
        self.calls += 1
        if self.calls <= self.times:
            raise NodeNotReadyError(
                f"Attempt to send a request to node which is not ready (node id {self.node})."
            )
        return ["stallwatch.events"]


async def test_a_broker_fenced_for_a_moment_is_asked_again_until_it_answers():
    call = FencedFor(times=3)
    assert await until_ready(Settings(), call, wait_s=5.0) == ["stallwatch.events"]
    assert call.calls == 4


async def test_a_broker_never_ready_ends_in_a_setup_error_naming_the_address():
    settings = Settings(bootstrap="10.1.2.3:9092")
    said = r"10\.1\.2\.3:9092 answered, but no broker was ready .* lists no broker"
    with pytest.raises(SetupError, match=said):
        await until_ready(settings, FencedFor(times=1_000), wait_s=0.3)


async def test_a_listed_broker_that_never_answers_is_told_as_its_advertised_address():
    with pytest.raises(SetupError, match="advertised addresses do not answer"):
        await until_ready(Settings(), FencedFor(times=1_000, node="1"), wait_s=0.3)


async def test_any_other_error_is_not_retried():
    calls = 0

    async def refused() -> list[str]:
        nonlocal calls
        calls += 1
        raise TopicAuthorizationFailedError("not allowed")

    with pytest.raises(TopicAuthorizationFailedError):
        await until_ready(Settings(), refused, wait_s=5.0)
    assert calls == 1
