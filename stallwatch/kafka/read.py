"""Reading partitions to their end, read committed: the one way the project reads a topic whole."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from stallwatch.kafka.aiokafka_patch import Consumer

# How long one fetch waits for records before the positions are checked against the ends again.
FETCH_TIMEOUT_MS = 500


def committed_reader(options: dict[str, Any], **extra: Any) -> AIOKafkaConsumer:
    """A consumer in no group that sees only committed records: an aborted transaction (its
    worker died mid-batch, or was fenced) is never read."""
    return Consumer(enable_auto_commit=False, isolation_level="read_committed", **options, **extra)


async def read_to_end(
    consumer: AIOKafkaConsumer,
    tps: Collection[TopicPartition],
    handle: Callable[[TopicPartition, list[ConsumerRecord]], None],
    max_records: int | None = None,
    on_fetch: Callable[[], None] | None = None,
    on_end: Callable[[TopicPartition], None] | None = None,
) -> None:
    """Hand every record from each partition's current position up to its end offset, taken now,
    to `handle`, in offset order per partition. `consumer` is started, assigned `tps` and
    positioned (e.g. seek_to_beginning). Done once every position reached its end: transaction
    markers take offsets too, so the last record may lie below the end. `on_fetch` runs after
    every fetch (a long read is progress, not a hang), `on_end` as each partition reaches its end."""
    ends = await consumer.end_offsets(list(tps))
    pending = set()
    for tp in tps:
        if await consumer.position(tp) < ends[tp]:
            pending.add(tp)
        elif on_end is not None:
            on_end(tp)
    while pending:
        batches = await consumer.getmany(*pending, timeout_ms=FETCH_TIMEOUT_MS, max_records=max_records)
        if on_fetch is not None:
            on_fetch()
        for tp, records in batches.items():
            handle(tp, records)
        for tp in list(pending):
            if await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
                if on_end is not None:
                    on_end(tp)
