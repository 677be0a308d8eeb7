"""`stallwatch worker`: create the topics, then run one Faust worker until stopped."""

from __future__ import annotations

import asyncio
import logging
import os

from stallwatch.streams.app import build_app
from stallwatch.streams.topics import ensure_topics

from stallwatch.metrics import StallwatchMetrics
from stallwatch.settings import Settings


def main(settings: Settings) -> int:
    import faust

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(ensure_topics(settings))
    metrics = StallwatchMetrics()
    metrics.serve(settings.metrics_port)
    app = build_app(settings, metrics)
    level = os.environ.get("STALLWATCH_LOG_LEVEL", "WARNING")
    worker = faust.Worker(app, loglevel=level, redirect_stdouts=False)
    worker.execute_from_commandline()
    return 0
