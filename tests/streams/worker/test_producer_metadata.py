"""A worker's producers renew the metadata of the topics they write, never the whole cluster's: on
a shared cluster an idle partition's producer would otherwise fetch every topic's partitions every
metadata_max_age_ms."""

from __future__ import annotations

import pytest
from aiokafka.client import AIOKafkaClient

from stallwatch.kafka import aiokafka_patch
from stallwatch.kafka.topics import ensure_topics
from stallwatch_streams.worker import producers
from stallwatch_streams.worker.commit import CommitTopics
from tests.kafka_harness import fresh_settings
from tests.waiting import until

pytestmark = pytest.mark.kafka


async def test_an_idle_workers_producers_ask_for_their_own_topics_only(monkeypatch) -> None:
    settings = fresh_settings(partitions=1).model_copy(update={"kafka_metadata_max_age_ms": 500})
    await ensure_topics(settings)
    asked: list[frozenset[str] | None] = []
    # The producers' client is the project's (stallwatch/kafka/aiokafka_patch.py).
    renew = aiokafka_patch.Client._metadata_update

    async def spying(self: AIOKafkaClient, cluster_metadata: object, topics: object) -> bool:
        asked.append(frozenset(topics) if topics else None)  # type: ignore[arg-type]
        return await renew(self, cluster_metadata, topics)

    monkeypatch.setattr(aiokafka_patch.Client, "_metadata_update", spying)
    partition = await producers.start_producer(settings, 0)
    ahead = await producers.start_ahead_producer(settings)
    try:
        await until(lambda: len(asked) >= 4, 60, "four renewals of the producers' metadata")  # nothing sent
    finally:
        await partition.stop()
        await ahead.stop()
    assert len(asked) >= 4
    assert None not in asked, "a producer asked for every topic of the cluster"
    assert set(asked) == {frozenset(CommitTopics.of(settings).all()), frozenset([settings.commands_topic])}
