"""Every use of Faust's internals, in one place: its aiokafka transport with two consumer settings
Faust does not expose, a fetch that never drains a partition Faust would drop, topics it creates
known to its client before it goes on; the transport installed on an app; events the flow's
resume drops read again; the consumer's committed offsets (tests/streams/fleet/test_transport.py,
tests/streams/fleet/test_flow_resume.py and tests/test_private_access.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping, Set
from typing import Any

import aiokafka
from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from stallwatch.kafka.aiokafka_patch import (
    Producer,
    on_project_client,
    read_committed_before_start,
    set_fetch_max_wait,
)

log = logging.getLogger(__name__)

# How long a topic Faust just created may take to show all its partitions with leaders in the
# client's metadata. Without the wait, a table's changelog created at start-up was counted as 0
# partitions at the group's join (until the next metadata refresh, minutes later) and every table
# write failed with PartitionsMismatch (seen with `faust -A stallwatch_streams.fleet.app worker`).
TOPIC_KNOWN_WAIT_S = 30.0


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """read_committed (Faust sets it only in its exactly_once mode, which has open defects:
    docs/decisions.md) and the fetch wait (Faust hard-codes 1,500 ms). Both are read by aiokafka
    at start(), after construction, so setting them on the built consumer is enough; so is the
    project's client (stallwatch/kafka/aiokafka_patch.py), which connects at start()."""

    fetch_wait_ms = 10

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        read_committed_before_start(consumer)
        set_fetch_max_wait(consumer, self.fetch_wait_ms)
        on_project_client(consumer)
        return consumer

    async def _fetch_records(
        self,
        consumer: aiokafka.AIOKafkaConsumer,
        active_partitions: Set[TP],
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Mapping[TP, list[Any]]:
        """Faust's fetch, with nothing drained that Faust would then drop (docs/decisions.md,
        "Fleet app: recovery after a rebalance"): aiokafka reads an empty partition set as "every
        partition", and Faust discards a batch that arrives after its flow stopped. Either way
        the consumer's position had moved past records nobody read; a table changelog (never
        committed, so never sought back) then left its recovery waiting forever."""
        # Faust annotates a builtin set (typing.Set) where any collections.abc.Set serves.
        records = await super()._fetch_records(
            consumer,
            _OnlyThese(active_partitions),  # type: ignore[arg-type]
            timeout=timeout,
            max_records=max_records,
        )
        if records and not self.consumer.flow_active:
            rewind(consumer, records)
            # At most once a rebalance: shows the race happened and cost nothing.
            log.info(
                "fetch: %d records of %d partitions fetched as a rebalance stopped the flow, "
                "put back to be read again",
                sum(map(len, records.values())),
                len(records),
            )
            return {}
        return records


class _OnlyThese(Set[TP]):
    """Faust's live set of the partitions it reads (pausing one removes it, even during a fetch
    already waiting), never empty in aiokafka's eyes: an empty one means "none", not "all"."""

    def __init__(self, live: Set[TP]) -> None:
        self.live = live

    def __contains__(self, tp: object) -> bool:
        return tp in self.live

    def __iter__(self) -> Iterator[TP]:
        return iter(list(self.live))

    def __len__(self) -> int:
        return len(self.live)

    def __bool__(self) -> bool:
        return True


def rewind(consumer: aiokafka.AIOKafkaConsumer, records: Mapping[TP, list[Any]]) -> None:
    """Put each partition back at the first of its drained records, as if never fetched. Called
    in the consumer's own thread right after the fetch returned, so no seek came in between."""
    for tp, batch in records.items():
        if batch:
            try:
                consumer.seek(tp, batch[0].offset)
            except IllegalStateError:
                continue  # no longer assigned: its new owner reads it from the committed offset


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Producer(faust_aiokafka.Producer):
    """Faust's producer, building the project's aiokafka producer (Faust's own hook for it)."""

    @property
    def _producer_type(self) -> type[Producer]:
        return Producer


class Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    Producer = _Producer

    async def _really_create_topic(
        self,
        owner: Any,
        client: aiokafka.AIOKafkaClient,
        topic: str,
        partitions: int,
        replication: int,
        **kwargs: Any,
    ) -> None:
        await super()._really_create_topic(owner, client, topic, partitions, replication, **kwargs)
        await until_known(client, topic, partitions)


async def until_known(
    client: aiokafka.AIOKafkaClient, topic: str, partitions: int, timeout_s: float = TOPIC_KNOWN_WAIT_S
) -> bool:
    """Refresh the client's metadata until `topic` shows `partitions` partitions, each with a
    leader; False (and a warning) if it still does not after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        cluster = client.cluster
        known = cluster.partitions_for_topic(topic) or set()
        if len(known) >= partitions and all(
            cluster.leader_for_partition(TopicPartition(topic, p)) not in (None, -1) for p in known
        ):
            return True
        if time.monotonic() >= deadline:
            log.warning(
                "topic %s: %d of its %d partitions known with a leader after %.0f s",
                topic,
                len(known),
                partitions,
                timeout_s,
            )
            return False
        await client.force_metadata_update()
        await asyncio.sleep(0.1)


def transport_for(fetch_wait_ms: int) -> type[Transport]:
    """The transport class with this fetch wait (a subclass: the setting stays per app)."""
    thread = type("ConsumerThread", (_ConsumerThread,), {"fetch_wait_ms": fetch_wait_ms})
    consumer = type(
        "Consumer",
        (_Consumer,),
        {"_new_consumer_thread": lambda self: thread(self, loop=self.loop, beacon=self.beacon)},
    )
    return type("Transport", (Transport,), {"Consumer": consumer})


def use_transport(app: Any, fetch_wait_ms: int) -> None:
    """The app's transport is this module's, with this fetch wait: Faust takes no transport
    argument, so its factory method is replaced on this app alone."""
    transport = transport_for(fetch_wait_ms)
    app._new_transport = lambda: transport(app.conf.broker_consumer, app)
    reread_what_resume_drops(app)


def reread_what_resume_drops(app: Any) -> None:
    """Events the app's flow control drops when it resumes are read again. Faust resumes it after
    a recovery's seek (`faust/tables/recovery.py`), and the resume empties every agent's queue;
    when the consumer's flow was never stopped (an assignment after an empty one), a fetch that
    already put events there loses them unacknowledged, with the consumer's position past them:
    nothing reads them again until the next rebalance. Each partition they came from is sought
    back to the first of them, never forward (a stale event from before the seek is read again
    anyway). Faust's processing is at least once, so an event read twice costs what a restart
    would."""
    flow = app.flow_control
    resume = flow.resume
    rereads: set[asyncio.Task[None]] = set()

    def resume_and_reread() -> None:
        dropped = first_queued_offsets(flow._queues)
        resume()
        if dropped:
            task = asyncio.ensure_future(reread(app.consumer, dropped))
            rereads.add(task)
            task.add_done_callback(rereads.discard)

    flow.resume = resume_and_reread


def first_queued_offsets(queues: Any) -> dict[TP, int]:
    """Per partition, the first offset of the events waiting in these queues (asyncio queues of
    Faust events; anything else in them is skipped)."""
    first: dict[TP, int] = {}
    for queue in list(queues):
        for item in list(getattr(queue, "_queue", ())):
            message = getattr(item, "message", None)
            tp, offset = getattr(message, "tp", None), getattr(message, "offset", None)
            if tp is not None and isinstance(offset, int):
                first[tp] = min(offset, first.get(tp, offset))
    return first


async def reread(consumer: Any, first: Mapping[TP, int]) -> None:
    """Each partition sought back to `first` if its position is past it."""
    for tp, offset in first.items():
        try:
            position = await consumer.position(tp)
            if position is None or position <= offset:
                continue
            await consumer.seek(tp, offset)
        except (IllegalStateError, KeyError):
            continue  # no longer assigned: its new owner reads it from the committed offset
        log.info(
            "partition %s-%d: events the flow's resume dropped are read again from offset %d",
            tp.topic,
            tp.partition,
            offset,
        )


def committed_offsets(consumer: Any) -> Mapping[TP, int]:
    """The offsets Faust's consumer last committed, per partition: Faust keeps them only in a
    private attribute (a missing one raises AttributeError, which the caller tolerates)."""
    return consumer._committed_offset
