"""`stallwatch fleet`: create the topics, then run one Faust worker of the fleet app."""

from __future__ import annotations

import asyncio
from pathlib import Path

from faust.worker import Worker

from stallwatch.kafka.topics import ensure_topics, fleet_app_topics
from stallwatch.logs import faust_logging_config, tame_kafka_loggers
from stallwatch.settings import Settings, SetupError
from stallwatch_streams.fleet.service import FleetService, changelog_topic
from stallwatch_streams.fleet.settings import FleetSettings


def _writable_datadir(datadir: Path) -> None:
    """Faust keeps a data folder in the working directory: one it cannot create is a set-up
    error, named in one line before the worker starts (Faust's own is a traceback, exit 1)."""
    try:
        datadir.mkdir(parents=True, exist_ok=True)
        probe = datadir / ".writable"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise SetupError(
            f"the fleet app keeps its data in {datadir.absolute()} and cannot write there "
            f"({exc.strerror}): run it in a writable working directory (the image's: /tmp)"
        ) from None


def main(settings: Settings) -> int:
    tame_kafka_loggers()  # aiokafka under Faust, in an outage: a few counted lines
    cfg = FleetSettings.from_env(settings)
    # Its own topics only (under ACLs it sees no other), the table's too: led before the join.
    asyncio.run(ensure_topics(settings, only=[*fleet_app_topics(settings), changelog_topic(cfg)]))
    service = FleetService(cfg)
    _writable_datadir(Path(service.app.conf.datadir))
    worker = Worker(service.app, loglevel="INFO", logging_config=faust_logging_config())
    worker.execute_from_commandline()
    return 0
