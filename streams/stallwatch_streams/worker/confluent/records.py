"""librdkafka's messages as the batch step reads records (`SourceRecord`)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message

from stallwatch_streams.worker.batch import LOG_APPEND_TIME

CREATE_TIME = 0


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds
    timestamp_type: int  # Kafka's: LOG_APPEND_TIME (1) or CreateTime (0)
    key: bytes | None
    value: bytes | None


def record_of(message: Message) -> Record:
    kind, timestamp = message.timestamp()
    return Record(
        message.topic() or "",
        message.partition() or 0,
        message.offset() or 0,
        timestamp,
        LOG_APPEND_TIME if kind == TIMESTAMP_LOG_APPEND_TIME else CREATE_TIME,
        message.key(),
        message.value(),
    )
