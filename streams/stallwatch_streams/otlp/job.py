"""Reads the topic the OpenTelemetry Collector's Kafka exporter writes (`encoding: otlp_proto`:
each record one `ExportTraceServiceRequest`), maps its spans to the events of observe-only runs
(`stallwatch.otlp`) and publishes them on the events topic, keyed by run, for the workers.

At least once: a batch's offsets are committed after its events are acknowledged. Event ids
come from the spans, so a batch read again makes the same ids, which the workers recognise. The
rounds being assembled live in this process: after a restart, a run in flight goes on from its
next round (its spans already read are not read again), and the rounds it had open are lost."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from stallwatch.engine.canonical import secret_from_key
from stallwatch.kafka.options import aiokafka_options
from stallwatch.otlp.ingest import OtlpIngest
from stallwatch.settings import Settings, reveal

log = logging.getLogger("stallwatch_streams.otlp")

# A record past this is no export of the Collector's (its producer's own limit is 1 MB by
# default): counted and skipped, never parsed.
MAX_RECORD_BYTES = 16 * 1024 * 1024


class OtlpKafkaJob:
    """One consumer of the spans topic in its group (`{prefix}-otlp`) and one producer of events."""

    def __init__(self, settings: Settings, tenant: str | None = None) -> None:
        self.settings = settings
        self.ingest = OtlpIngest(
            tenant=tenant or settings.tenant,
            mode=settings.otlp_mode,
            secret=secret_from_key(reveal(settings.fingerprint_key)),
            quiet_s=settings.otlp_round_quiet_s,
            idle_s=settings.otlp_run_idle_s,
        )
        self.counts: Counter = self.ingest.counts
        self.published = 0
        self.registry = CollectorRegistry()
        self._items = PromCounter(
            "stallwatch_otlp_items_total",
            "OTLP spans read from the Collector's topic, by outcome (docs/otlp.md)",
            ["outcome"],
            registry=self.registry,
        )
        self._events_published = PromCounter(
            "stallwatch_otlp_events_published_total", "Events published from spans", registry=self.registry
        )
        self._reported: Counter = Counter()

    async def run(self, stop: asyncio.Event, sweep_interval_s: float = 1.0) -> None:
        options = aiokafka_options(self.settings)
        consumer = AIOKafkaConsumer(
            self.settings.otlp_topic,
            group_id=f"{self.settings.topic_prefix}-otlp",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=MAX_RECORD_BYTES,
            fetch_max_bytes=MAX_RECORD_BYTES * 2,
            **options,
        )
        producer = AIOKafkaProducer(acks="all", enable_idempotence=True, linger_ms=5, **options)
        await consumer.start()
        await producer.start()
        try:
            swept = time.monotonic()
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                events: list[dict[str, Any]] = []
                for records in batches.values():
                    for record in records:
                        events += self._events(record.value)
                if time.monotonic() - swept >= sweep_interval_s:
                    events += self.ingest.sweep()
                    swept = time.monotonic()
                if events:
                    await self._publish(producer, events)
                if batches:
                    await consumer.commit()
                self._report()
        finally:
            await consumer.stop()
            await producer.stop()

    def _report(self) -> None:
        """The counts since the last report into the Prometheus counters."""
        for outcome, count in self.counts.items():
            if count > self._reported[outcome]:
                self._items.labels(outcome).inc(count - self._reported[outcome])
                self._reported[outcome] = count

    def _events(self, value: bytes | None) -> list[dict[str, Any]]:
        if value is None:
            self.counts["empty_record"] += 1
            return []
        if len(value) > MAX_RECORD_BYTES:
            self.counts["record_too_large"] += 1
            return []
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(value)
        except DecodeError:
            self.counts["not_otlp_proto"] += 1  # another encoding (otlp_json, jaeger): not read
            return []
        return self.ingest.trace_request(request)

    async def _publish(self, producer: AIOKafkaProducer, events: list[dict[str, Any]]) -> None:
        topic = self.settings.events_topic
        deliveries = [
            await producer.send(topic, orjson.dumps(event), key=event["run_id"].encode()) for event in events
        ]
        await asyncio.gather(*deliveries)
        self.published += len(events)
        self._events_published.inc(len(events))
