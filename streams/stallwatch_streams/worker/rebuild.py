"""Runs whose stored state this version cannot read, rebuilt from their events before their
partition is served: the events topic is the source of truth, the changelog its cache.

A state in a format this version does not read (written by a later release, or by one too old
to be read any more) is never dropped in silence: while the run's events, from its run_started
up to the partition's committed position, are still in the events topic, they are applied again
by the batch step itself, its commands discarded (they went out when the events were first
applied), and the run is served from the state they build. A run whose run_started is gone keeps
its unreadable state; its next event quarantines it with a `state_format` dead letter
(`stallwatch.engine.records.UnreadableRun`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.state import READABLE_FORMATS
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings
from stallwatch_streams.worker.batch import BatchApplier
from stallwatch_streams.worker.store import RESTORE_FETCH_BYTES, PartitionStates

log = logging.getLogger(__name__)


async def rebuild_unreadable(
    settings: Settings,
    applier: BatchApplier,
    restored: dict[int, PartitionStates],
    on_progress: Callable[[], None],
) -> dict[int, tuple[int, int]]:
    """Rebuild each partition's unreadable runs from the events topic, in place. Returns, per
    partition with any, (runs rebuilt, runs left unreadable)."""
    formats = {
        p: ", ".join(sorted({str(f) for f in states.unreadable.values()})) for p, states in restored.items()
    }
    wanted = {
        p: states for p, states in restored.items() if states.unreadable and states.position is not None
    }
    outcome = {p: (0, len(states.unreadable)) for p, states in restored.items() if states.unreadable}
    if not wanted:
        return _report(outcome, formats, settings)
    started = time.monotonic()
    events: dict[int, list[ConsumerRecord]] = {p: [] for p in wanted}

    def take(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        states = wanted[tp.partition]
        position = states.position
        assert position is not None
        mine = events[tp.partition]
        for record in records:
            if record.offset < position and record.key is not None:
                try:
                    run_id = record.key.decode()
                except UnicodeDecodeError:
                    continue
                if run_id in states.unreadable:
                    mine.append(record)

    consumer = committed_reader(
        aiokafka_options(settings),
        fetch_max_bytes=RESTORE_FETCH_BYTES,
        max_partition_fetch_bytes=RESTORE_FETCH_BYTES,
    )
    try:
        await consumer.start()
        tps = [TopicPartition(settings.events_topic, p) for p in wanted]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await read_to_end(consumer, tps, take, max_records=100_000, on_fetch=on_progress)
    finally:
        await consumer.stop()
    for partition, states in wanted.items():
        # A clock of its own: the partition's stays where the commits left it.
        result = applier.apply(events[partition], lambda run_id: None, PartitionClock(), time.time())
        rebuilt = 0
        for run_id, state in result.states.items():
            if run_id in states.unreadable:
                states.replace_unreadable(run_id, state)
                rebuilt += 1
        outcome[partition] = (rebuilt, len(states.unreadable))
    log.info("read the events topic to rebuild runs in %.2f s", time.monotonic() - started)
    return _report(outcome, formats, settings)


def _report(
    outcome: dict[int, tuple[int, int]], formats: dict[int, str], settings: Settings
) -> dict[int, tuple[int, int]]:
    for partition, (rebuilt, left) in sorted(outcome.items()):
        log.warning(
            "partition %d of %s: %d runs stored in a state format this version does not read "
            "(found: %s; this version reads %s); "
            "%d rebuilt from the events topic, %d quarantined at their next event "
            "(state_format dead letters)",
            partition,
            settings.events_topic,
            rebuilt + left,
            formats[partition],
            ", ".join(str(f) for f in sorted(READABLE_FORMATS)),
            rebuilt,
            left,
        )
    return outcome
