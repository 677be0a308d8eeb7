"""The partitions' transactional producers: one per input partition, under a stable id that fences."""

from __future__ import annotations

import contextlib

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from stallwatch.kafka.aiokafka_patch import Producer, batches_wait_for_a_leader
from stallwatch.kafka.options import aiokafka_options
from stallwatch.settings import Settings
from stallwatch_streams.worker.commit import AheadProducer, CommitTopics, TransactionalProducer
from stallwatch_streams.worker.retry import until_done

# Other retries of the transactional producer back off this long: the same refusal met by the
# offsets later in a transaction (at 10 ms, the decision latency's p50 was
# 21-29 ms; at 2-5 ms, 15-17 ms), and coordinator moves, where a few ms keep the retries sparse.
RETRY_BACKOFF_MS = 5
# A transaction's coordinator aborts it when its producer goes silent this long: a worker that
# dies mid-batch holds back its partitions' read-committed readers at most this long (a
# successor's fencing aborts it sooner).
TRANSACTION_TIMEOUT_MS = 15_000


def transactional_id(settings: Settings, partition: int) -> str:
    """The same for whichever worker owns the partition: a successor's producer fences the
    previous owner's (aborts its open transaction, refuses its later writes)."""
    return f"{settings.group_id}-{settings.events_topic}-{partition}"


async def start_producer(settings: Settings, partition: int) -> TransactionalProducer:
    producer = Producer(
        transactional_id=transactional_id(settings, partition),
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        linger_ms=0,
        retry_backoff_ms=RETRY_BACKOFF_MS,
        **aiokafka_options(settings),
    )
    return _tracking(await _started(producer), CommitTopics.of(settings).all())


async def start_ahead_producer(settings: Settings) -> AIOKafkaProducer:
    """The worker's one producer of commands published ahead of their batch's transaction:
    idempotent (a retried send is written once, in order), acknowledged by every in-sync
    replica, never part of a transaction (so the commands topic holds no open transaction and
    read-committed readers see a command as soon as it is acknowledged)."""
    producer = Producer(
        enable_idempotence=True,
        acks="all",
        linger_ms=0,
        retry_backoff_ms=RETRY_BACKOFF_MS,
        **aiokafka_options(settings),
    )
    # A batch lost unsent (expired with no leader) would let the next ones overtake it.
    batches_wait_for_a_leader(producer)
    return _tracking(await _started(producer), [settings.commands_topic])


async def start_attempts_producer(settings: Settings) -> AIOKafkaProducer:
    """The worker's one producer of attempts records (stallwatch_streams/worker/attempts.py):
    acknowledged by every in-sync replica, in no transaction, and not idempotent: each write is
    awaited before the next of its partition, so a retried duplicate is the same record again,
    and an idempotent producer that lost a send refuses every later one (it has no epoch bump in
    aiokafka)."""
    producer = Producer(acks="all", linger_ms=0, **aiokafka_options(settings))
    return _tracking(await _started(producer), [settings.attempts_topic])


def _tracking(producer: AIOKafkaProducer, topics: list[str]) -> AIOKafkaProducer:
    """The producer renews the metadata of the topics it writes only. aiokafka's client asks for
    every topic of the cluster while it has sent to none (a partition whose runs are idle): on a
    shared cluster of 12,500 partitions that cost an idle worker 19% of a core, every
    metadata_max_age_ms."""
    producer.client.set_topics(topics)
    return producer


async def replace_ahead_producer(settings: Settings, broken: AheadProducer) -> AIOKafkaProducer:
    """A new producer of commands published ahead in place of one that failed a send: the broken
    one stopped, the new one started once the broker answers."""
    await stop_quietly(broken)
    return await until_done(lambda: start_ahead_producer(settings))


async def _started(producer: AIOKafkaProducer) -> AIOKafkaProducer:
    """Started, or stopped again (its connections closed) and the error raised. A broker just
    back (thawed, restarted) can answer the bootstrap with metadata naming no broker, and
    aiokafka's transaction coordinator lookup then fails an assertion ("Did we not perform
    bootstrap?"; it does not wait for a broker list, aio-libs/aiokafka#460): that is a broker not
    ready yet, raised as a connection error the caller retries."""
    try:
        await producer.start()
    except AssertionError as exc:
        await producer.stop()
        raise KafkaConnectionError(f"the cluster named no broker yet ({exc})") from exc
    except BaseException:
        await producer.stop()
        raise
    return producer


async def stop_quietly(producer: TransactionalProducer | AheadProducer) -> None:
    with contextlib.suppress(Exception):  # a fenced producer may refuse to close cleanly
        await producer.stop()
