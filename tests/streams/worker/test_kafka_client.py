"""The Kafka client on the real broker: its own partitions only, verdicts, stops, failing open."""

from __future__ import annotations

import pytest

from stallwatch.client import KafkaClient
from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import fresh_settings, serving_worker

pytestmark = pytest.mark.kafka

DOCS = {"documents": [{"id": "a"}]}


async def test_a_client_reads_only_the_partitions_of_its_runs_and_gets_their_commands():
    async with (
        serving_worker(partitions=8) as (settings, _),
        KafkaClient(settings, verdict_timeout_s=20) as mine,
        KafkaClient(settings, verdict_timeout_s=20) as other,
    ):
        run = await mine.start_run("client-looper", "researcher", [{"name": "search"}])
        far = next(
            f"other-{i}"
            for i in range(100)
            if other.partition_for(f"other-{i}") != mine.partition_for(run.run_id)
        )
        other_run = await other.start_run(far, "chat", [{"name": "price"}])
        assert {tp.partition for tp in mine._assigned} == {mine.partition_for(run.run_id)}
        for i in range(6):
            await run.start_round()
            call_id, decision = await run.propose("search", {"q": f"wording {i}"})
            assert decision.allowed and not decision.timed_out
            await run.result(call_id, "search", "ok", DOCS)
            await run.end_round()
        _, decision = await other_run.propose("price", {"s": "A"})
        assert decision.allowed and not decision.timed_out
        await run.stopped.wait()
        assert run.stop.code == "no_new_facts"
        await run.start_round()
        _, decision = await run.propose("search", {"q": "one more"})
        assert (decision.allowed, decision.code) == (False, "run_stopped")


async def test_with_no_worker_a_verdict_times_out_and_fails_open():
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)
    # Long enough for the broker to acknowledge the call on a loaded machine: at 0.5 s, a slow ack
    # (once in a full suite under load) read as the broker being away, which is a different answer.
    async with KafkaClient(settings, verdict_timeout_s=3.0) as client:
        run = await client.start_run("lonely", "researcher", [{"name": "search"}])
        await run.start_round()
        _, decision = await run.propose("search", {"q": "x"})
    assert decision.allowed and decision.timed_out and "no verdict within 3 s" in decision.reason
