"""Changelog restores shared by a worker's tenants (the group model): the restores asked for
while one read is under way are read together in the next one, in one consumer for every
tenant's partitions, where each tenant's restore started a consumer of its own (a worker taking
over a hundred tenants at once started a hundred, and each restore took seconds). A request is
answered as soon as its own partitions reached their ends, so a tenant with a long changelog
holds back no other tenant's restore past the read's first fetches."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from stallwatch.engine.quota import RunQuota
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings
from stallwatch_streams.worker.store import (
    RESTORE_FETCH_BYTES,
    ChangelogImage,
    PartitionStates,
    UnreadablePosition,
)

log = logging.getLogger(__name__)


@dataclass
class _Request:
    topic: str
    partitions: list[int]
    on_progress: Callable[[], None]
    quota: RunQuota | None
    done: asyncio.Future[dict[int, PartitionStates]]
    waiting: set[int] = field(default_factory=set)  # partitions not at their end yet


class SharedRestores:
    """`store.restore` for many tenants at once (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings.for_tenant(None)
        self._wanted: list[_Request] = []
        self._reading = asyncio.Lock()
        self._reads: set[asyncio.Task[None]] = set()

    async def restore(
        self,
        settings: Settings,
        partitions: list[int],
        on_progress: Callable[[], None],
        quota: RunQuota | None = None,
    ) -> dict[int, PartitionStates]:
        """`store.restore`'s answer, from a read that began after this call."""
        loop = asyncio.get_running_loop()
        request = _Request(
            settings.changelog_topic, list(partitions), on_progress, quota, loop.create_future()
        )
        self._wanted.append(request)
        # A task of its own: a caller cancelled meanwhile must not leave the others unanswered.
        reading = loop.create_task(self._read_wanted(), name="changelog-restore")
        self._reads.add(reading)
        reading.add_done_callback(self._reads.discard)
        return await request.done

    async def _read_wanted(self) -> None:
        async with self._reading:
            wanted, self._wanted = self._wanted, []
            if not wanted:
                return  # read together with earlier ones
            try:
                await self._read(wanted)
            except BaseException as exc:
                for request in wanted:
                    if request.done.done():
                        continue
                    if isinstance(exc, Exception):
                        request.done.set_exception(exc)
                    else:
                        request.done.cancel()
                if not isinstance(exc, Exception):
                    raise

    async def _read(self, wanted: list[_Request]) -> None:
        started = time.monotonic()
        images: dict[TopicPartition, ChangelogImage] = {}
        by_tp: dict[TopicPartition, list[_Request]] = {}
        for request in wanted:
            request.waiting = set(request.partitions)
            for partition in request.partitions:
                tp = TopicPartition(request.topic, partition)
                images.setdefault(tp, ChangelogImage(partition))
                by_tp.setdefault(tp, []).append(request)

        def take(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
            images[tp].take(records)

        def ended(tp: TopicPartition) -> None:
            for request in by_tp[tp]:
                request.waiting.discard(tp.partition)
                if not request.waiting:
                    self._answer(request, images, started)

        def fetched() -> None:
            for request in wanted:
                if request.waiting:
                    request.on_progress()

        consumer = committed_reader(
            aiokafka_options(self.settings),
            fetch_max_bytes=RESTORE_FETCH_BYTES,
            max_partition_fetch_bytes=RESTORE_FETCH_BYTES,
        )
        try:
            await consumer.start()
            tps = list(images)
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            await read_to_end(consumer, tps, take, max_records=100_000, on_fetch=fetched, on_end=ended)
        finally:
            await consumer.stop()

    @staticmethod
    def _answer(request: _Request, images: dict[TopicPartition, ChangelogImage], started: float) -> None:
        if request.done.done():
            return
        mine = [images[TopicPartition(request.topic, p)] for p in request.partitions]
        unreadable = next((image for image in mine if image.unreadable), None)
        if unreadable is not None:
            request.done.set_exception(UnreadablePosition(unreadable.partition))
            return
        request.done.set_result({image.partition: image.states(request.quota) for image in mine})
        log.info(
            "restored %d runs of partitions %s of %s in %.2f s",
            sum(len(image.raw) for image in mine),
            request.partitions,
            request.topic,
            time.monotonic() - started,
        )
