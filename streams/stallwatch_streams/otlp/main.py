"""`stallwatch otlp-kafka`: create the topics, then map the Collector's spans until SIGTERM."""

from __future__ import annotations

import asyncio
import signal

from prometheus_client import start_http_server

from stallwatch.kafka.topics import ensure_topics
from stallwatch.logs import configure as configure_logging
from stallwatch.settings import Settings
from stallwatch_streams.otlp.job import OtlpKafkaJob


def main(settings: Settings) -> int:
    configure_logging()
    return asyncio.run(_serve(settings))


async def _serve(settings: Settings) -> int:
    await ensure_topics(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    job = OtlpKafkaJob(settings)
    # Its counts on the workers' metrics port setting (give this process a port of its own).
    start_http_server(settings.metrics_port, addr=settings.metrics_bind, registry=job.registry)
    await job.run(stop)
    return 0
