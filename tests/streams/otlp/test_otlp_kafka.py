"""`stallwatch otlp-kafka` on a real broker: records exactly as the OpenTelemetry Collector's
Kafka exporter writes them (`encoding: otlp_proto`, each value one ExportTraceServiceRequest,
`partition_traces_by_id`: keyed by trace id), mapped to events and judged by a real worker."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from stallwatch.kafka.topics import ensure_topics
from stallwatch_streams.otlp.job import OtlpKafkaJob
from tests.adapters import scripts
from tests.adapters.pydantic_ai_model import QUESTION, agent_for
from tests.kafka_harness import (
    PROBE_PREFIX,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    wait_until_serving,
)
from tests.otlp.receiver import would_have

pytestmark = pytest.mark.kafka


def spans_of_a_looping_agent() -> list:
    """A real Pydantic AI agent's spans (its own instrumentation, the SDK's provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = agent_for(
        scripts.rewording(),
        scripts.Tools(),
        Instrumentation(InstrumentationSettings(tracer_provider=provider)),
    )
    agent.run_sync(QUESTION)
    return list(exporter.get_finished_spans())


async def test_the_collectors_records_become_an_observed_run_that_would_have_stopped():
    settings = fresh_settings(partitions=2)
    settings = settings.model_copy(update={"otlp_topic": f"{settings.topic_prefix}.otlp_spans"})
    await ensure_topics(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:  # the Collector's topic, as its operator creates it
        await admin.create_topics([NewTopic(settings.otlp_topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    spans = await asyncio.to_thread(spans_of_a_looping_agent)  # run_sync: a loop of its own
    # The Collector's batches: a few spans per record, in the order they ended, each record the
    # OTLP protobuf of its spans (the exporter's encoding), keyed by their trace id.
    records = [encode_spans(spans[i : i + 4]).SerializeToString() for i in range(0, len(spans), 4)]
    key = spans[0].context.trace_id.to_bytes(16, "big")
    worker = WorkerProcess(settings)
    job = OtlpKafkaJob(settings)
    stop = asyncio.Event()
    running = asyncio.create_task(job.run(stop))
    try:
        await wait_until_serving(settings)
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
        await producer.start()
        try:
            for value in [*records, b"not a protobuf export \xff\xff"]:
                await producer.send_and_wait(settings.otlp_topic, value, key=key)
        finally:
            await producer.stop()
        # 20 calls answered, the nudge and the stop: the worker's commands for the run
        published = await collect(settings, settings.commands_topic, 22, 60)
    finally:
        worker.stop()
        stop.set()
        await running
    runs = {r: c for r, c in by_run(published).items() if not r.startswith(PROBE_PREFIX)}
    (commands,) = runs.values()
    observed = would_have([orjson.loads(c) for c in commands])
    assert observed[:2] == [("nudge", 4, ""), ("stop", 6, "no_new_facts")]  # as the adapter decides
    assert observed[2:] == [("refuse", n, "run_stopped") for n in range(7, 21)]
    assert job.counts["tool"] == 20 and job.counts["model"] == 21 and job.counts["not_otlp_proto"] == 1
    text = generate_latest(job.registry).decode()
    assert 'stallwatch_otlp_items_total{outcome="not_otlp_proto"} 1.0' in text
    assert 'stallwatch_otlp_items_total{outcome="tool"} 20.0' in text
