"""Create the source, command and dead-letter topics when missing; Faust declares only its own."""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stallwatch.kafka_config import aiokafka_options
from stallwatch.settings import Settings

log = logging.getLogger(__name__)

# A dead letter carries the raw event escaped as text, which can be several times its size;
# the topic takes up to 8 MiB so that no dead letter is refused by the broker.
DEADLETTER_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


async def ensure_topics(settings: Settings) -> None:
    """Create the events, commands and dead-letter topics with the configured partitions,
    replication factor and min.insync.replicas."""
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    replication = settings.replication_factor
    durable = {"min.insync.replicas": str(settings.min_insync_replicas)}
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(settings.events_topic, settings.partitions, replication, topic_configs=durable),
            # Same partition count as events: a run's commands land on the partition its
            # events use, which is what lets a client read only its own partitions.
            NewTopic(settings.commands_topic, settings.partitions, replication, topic_configs=durable),
            NewTopic(settings.deadletter_topic, settings.partitions, replication,
                     topic_configs={**durable,
                                    "max.message.bytes": str(DEADLETTER_MAX_MESSAGE_BYTES)}),
        ]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            await admin.create_topics(missing)
            log.info("created topics %s", [t.name for t in missing])
    finally:
        await admin.close()
