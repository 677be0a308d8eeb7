"""The topics as the broker keeps them: what ensure_topics asks for is what each topic got."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import fresh_settings

pytestmark = pytest.mark.kafka


async def topic_configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's configuration as the broker describes it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
        )
    finally:
        await admin.close()
    found: dict[str, dict[str, str]] = {}
    for response in responses:
        for _error, _message, _type, name, entries in response.resources:
            found[name] = {entry[0]: entry[1] for entry in entries}
    return found


async def test_events_carry_the_brokers_time_and_incidents_and_states_are_compacted():
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)
    configs = await topic_configs(
        settings.bootstrap,
        [settings.events_topic, settings.incidents_topic, settings.changelog_topic, settings.tallies_topic],
    )
    # Expiry reads the append time: a producer's clock never stamps an event.
    assert configs[settings.events_topic]["message.timestamp.type"] == "LogAppendTime"
    # The latest record of an incident, and of a run's state, is kept whatever its age.
    assert configs[settings.incidents_topic]["cleanup.policy"] == "compact"
    assert configs[settings.changelog_topic]["cleanup.policy"] == "compact"
    # The tallies are a feed: deleted by age.
    assert configs[settings.tallies_topic]["cleanup.policy"] == "delete"
    assert configs[settings.tallies_topic]["retention.ms"] == "3600000"
