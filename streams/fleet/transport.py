"""Faust's aiokafka transport with the two consumer settings Faust does not expose."""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """read_committed (Faust sets it only in its exactly_once mode, which has open defects:
    docs/decisions.md) and the fetch wait (Faust hard-codes 1,500 ms). Both are read by aiokafka
    at start(), after construction, so setting them on the built consumer is enough."""

    fetch_wait_ms = 10

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"
        consumer._fetch_max_wait_ms = self.fetch_wait_ms
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


def transport_for(fetch_wait_ms: int) -> type[Transport]:
    """The transport class with this fetch wait (a subclass: the setting stays per app)."""
    thread = type("ConsumerThread", (_ConsumerThread,), {"fetch_wait_ms": fetch_wait_ms})
    consumer = type("Consumer", (_Consumer,), {"_new_consumer_thread":
                                               lambda self: thread(self, loop=self.loop, beacon=self.beacon)})
    return type("Transport", (Transport,), {"Consumer": consumer})
