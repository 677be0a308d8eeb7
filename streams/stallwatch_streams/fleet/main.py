"""`stallwatch fleet`: create the topics, then run one Faust worker of the fleet app."""

from __future__ import annotations

import asyncio

from faust.worker import Worker

from stallwatch.kafka.topics import ensure_topics, fleet_app_topics
from stallwatch.logs import tame_kafka_loggers
from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import FleetService, changelog_topic
from stallwatch_streams.fleet.settings import FleetSettings


def main(settings: Settings) -> int:
    tame_kafka_loggers()  # aiokafka under Faust, in an outage: a few counted lines
    cfg = FleetSettings.from_env(settings)
    # Its own topics only (under ACLs it sees no other), the table's too: led before the join.
    asyncio.run(ensure_topics(settings, only=[*fleet_app_topics(settings), changelog_topic(cfg)]))
    service = FleetService(cfg)
    worker = Worker(service.app, loglevel="INFO")
    worker.execute_from_commandline()
    return 0
