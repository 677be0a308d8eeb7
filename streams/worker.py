"""`stallwatch worker`: create the topics, then run one Faust worker until stopped."""

from __future__ import annotations

import asyncio
import os
import logging

from stallwatch.settings import Settings
from stallwatch.streams.app import build_app
from stallwatch.streams.topics import ensure_topics


def main(settings: Settings) -> int:
    import faust

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(ensure_topics(settings))
    app = build_app(settings)
    worker = faust.Worker(app, loglevel=os.environ.get("STALLWATCH_LOG_LEVEL", "WARNING"), redirect_stdouts=False)
    worker.execute_from_commandline()
    return 0
