"""The worker's one producer of commands published ahead of their batch's transaction, on
librdkafka: idempotent (a retried send is written once, in order; librdkafka bumps its epoch
after a lost send instead of refusing every later one), acknowledged by every in-sync replica,
never part of a transaction. A thread of its own serves its acknowledgements to the loop. The
poison guard's attempts go through another one of these (confluent/attempts.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException, Producer

from stallwatch.settings import Settings
from stallwatch_streams.worker.confluent.options import librdkafka_options

log = logging.getLogger(__name__)

# How long the thread waits for acknowledgements at a time (also how soon it sees a stop).
POLL_S = 0.05


class CommandSendFailed(KafkaError):
    """A record sent (a command published ahead, an attempt) was not acknowledged."""


class AheadPublisher:
    """`commit.AheadProducer` on librdkafka, shared by every tenant of the worker."""

    def __init__(self, settings: Settings) -> None:
        self._producer = Producer(
            {
                **librdkafka_options(settings),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                # A send waits for its partition's leader as long as it takes: one lost unsent
                # would let a run's later commands overtake it.
                "message.timeout.ms": 0,
            }
        )
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stallwatch-ahead", daemon=True)
        self._thread.start()

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[Any]:
        while True:
            try:
                return self._produce(topic, value, key, partition)
            except BufferError:
                await asyncio.sleep(POLL_S)  # the queue full: its acknowledgements come first
            except KafkaException as exc:
                raise CommandSendFailed(str(exc)) from exc

    def offer(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[Any] | None:
        """Queued at once, its acknowledgement's future returned; None when the queue is full or
        the producer refuses it."""
        try:
            return self._produce(topic, value, key, None)
        except (BufferError, KafkaException):
            return None

    def _produce(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int | None
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[Any] = loop.create_future()

        def delivered(error: Any, _message: Any) -> None:
            loop.call_soon_threadsafe(
                _settle, acked, None if error is None else CommandSendFailed(str(error))
            )

        self._producer.produce(
            topic, value, key, -1 if partition is None else partition, on_delivery=delivered
        )
        return acked

    def post(self, topic: str, value: bytes, key: bytes) -> bool:
        """Queued without a future: its acknowledgement is not awaited, and a failure is logged on
        this producer's thread. False when the queue is full or the producer refuses it."""
        try:
            self._producer.produce(topic, value, key, on_delivery=_logged_failure)
        except (BufferError, KafkaException):
            return False
        return True

    async def stop(self) -> None:
        """Shared: its owner closes it (`close`)."""

    async def close(self, flush_s: float = 5.0) -> None:
        """Its thread ended, and what it still holds sent for up to `flush_s`."""
        self._stopped.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)
        with contextlib.suppress(Exception):
            await asyncio.get_running_loop().run_in_executor(None, self._producer.flush, flush_s)

    def _serve(self) -> None:
        while not self._stopped.is_set():
            self._producer.poll(POLL_S)


def _logged_failure(error: Any, message: Any) -> None:
    if error is not None:
        log.warning("a record posted to %s was not acknowledged: %s", message.topic(), error)


def _settle(future: asyncio.Future[Any], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
