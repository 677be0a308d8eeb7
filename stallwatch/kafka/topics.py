"""Create the events, commands, dead-letter, changelog and tallies topics when missing."""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stallwatch.kafka.options import aiokafka_options
from stallwatch.settings import Settings

log = logging.getLogger(__name__)

# A dead letter carries at most a bounded slice of the raw event; the topic still takes up to
# 8 MiB, so that an older worker's larger letters are never refused by the broker.
DEADLETTER_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# The tallies are a feed the fleet app reads within seconds, not state: an hour of them lets a
# fleet app down for a while catch up, without the topic growing with the worker's throughput.
TALLIES_RETENTION_MS = 3_600_000


def wanted_topics(settings: Settings) -> list[NewTopic]:
    """Every topic with the same partition count: a run's events, commands, dead letters and
    state share a partition number, which is what lets one transaction cover them and a client
    read only its own runs' partitions."""
    durable = {"min.insync.replicas": str(settings.min_insync_replicas)}
    partitions, replicas = settings.partitions, settings.replication_factor
    return [
        NewTopic(settings.events_topic, partitions, replicas, topic_configs=durable),
        NewTopic(settings.commands_topic, partitions, replicas, topic_configs=durable),
        NewTopic(settings.deadletter_topic, partitions, replicas,
                 topic_configs={**durable, "max.message.bytes": str(DEADLETTER_MAX_MESSAGE_BYTES)}),
        # Compacted only: retention must never delete a run's latest state. Short segments and an
        # eager cleaner keep it near one record per run, so a recovering worker reads little more
        # than the live states.
        NewTopic(settings.changelog_topic, partitions, replicas,
                 topic_configs={**durable, "cleanup.policy": "compact", "segment.ms": "600000",
                                "min.cleanable.dirty.ratio": "0.1"}),
        NewTopic(settings.tallies_topic, partitions, replicas,
                 topic_configs={**durable, "cleanup.policy": "delete",
                                "retention.ms": str(TALLIES_RETENTION_MS)}),
    ]


async def ensure_topics(settings: Settings) -> None:
    """Create the missing topics; existing ones are left as they are."""
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in wanted_topics(settings) if t.name not in existing]
        if missing:
            response = await admin.create_topics(missing)
            # Error 36: another worker starting at the same moment created it first.
            errors = [(name, code) for name, code, *_ in response.topic_errors if code not in (0, 36)]
            if errors:
                raise RuntimeError(f"could not create topics: {errors}")
            log.info("created topics %s", [t.name for t in missing])
    finally:
        await admin.close()
