"""`stallwatch mcp-proxy --kafka`: the same proxy judged by a worker through the real broker."""

from __future__ import annotations

import pytest

from stallwatch.engine import words
from tests.kafka_harness import serving_worker
from tests.mcp.session import next_round, proxy_session, text

pytestmark = pytest.mark.kafka


async def test_a_rewording_loop_through_kafka_is_stopped_and_a_repeat_refused(broker):
    async with serving_worker(partitions=2) as (settings, _):
        env = {
            "STALLWATCH_BOOTSTRAP": settings.bootstrap,
            "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
            "STALLWATCH_PARTITIONS": str(settings.partitions),
        }
        async with proxy_session("--kafka", env=env) as session:
            first = await session.call_tool("search", {"query": "wording 0"})
            repeat = await session.call_tool("search", {"query": "wording 0"})
            results = [first]
            for i in range(1, 8):
                await next_round()
                results.append(await session.call_tool("search", {"query": f"wording {i}"}))
    assert "kafka-docs" in text(first) and not first.is_error
    assert repeat.is_error and text(repeat) == words.duplicate_call("search")
    assert [r.is_error for r in results] == [False] * 6 + [True] * 2
    assert text(results[-1]) == words.stop_reason("no_new_facts", {"already_seen_streak": 5})
