"""The fleet app's transport: a topic Faust creates is known to its client before Faust goes on."""

from __future__ import annotations

import aiokafka
import mode
import pytest
from aiokafka import TopicPartition

from streams.fleet.service import FleetService
from streams.fleet.settings import FleetSettings
from tests.kafka_harness import fresh_settings

pytestmark = pytest.mark.kafka


async def test_a_topic_faust_creates_is_known_to_its_client_with_every_partition_led() -> None:
    # Faust creates a table's changelog at start-up; a client that did not know it yet counted it
    # as 0 partitions at the join, and every table write failed (PartitionsMismatch).
    settings = fresh_settings(partitions=8)
    transport = FleetService(FleetSettings.from_env(settings)).app.transport
    client = aiokafka.AIOKafkaClient(bootstrap_servers=settings.bootstrap)
    await client.bootstrap()
    try:
        topic = f"{settings.topic_prefix}-created-by-faust"
        await transport._really_create_topic(mode.Service(), client, topic, 8, 1)
        assert client.cluster.partitions_for_topic(topic) == set(range(8))
        assert all(client.cluster.leader_for_partition(TopicPartition(topic, p)) not in (None, -1)
                   for p in range(8))
    finally:
        await client.close()
