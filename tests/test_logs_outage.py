"""Log lines during a 30 s broker outage, on the project's real broker stopped and started: the
worker and the Kafka client each say when it goes, summarise while it lasts, say when it is back.

The broker here is a second one, on STALLWATCH_KAFKA_PORT + 2 (as in
tests/client/test_kafka_broker_away.py), so the broker the rest of the suite uses never goes down.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import subprocess
import time
import uuid

import orjson
import pytest

from stallwatch.client import KafkaClient
from stallwatch.kafka.topics import ensure_topics
from stallwatch.logs import tame_kafka_loggers
from stallwatch.settings import Settings
from tests.kafka_harness import ROOT, WorkerProcess, wait_until_serving
from tests.waiting import until

# The outage broker is started and stopped by these tests: one xdist worker runs them all.
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("outage-broker")]

PORT = int(os.environ.get("STALLWATCH_KAFKA_PORT", "9092")) + 2
OUTAGE_S = 30.0
SUMMARY_S = 10.0
# The Kafka client's own: its "fails open" and "answers again", and the folded Kafka summary (one
# line when it goes, a summary every SUMMARY_S, one when it is back): a handful, not 173,554.
MOST_LINES = 10
# The worker's own lines, beside the folded Kafka summary: a transaction the outage broke and the
# rebuild's restore, a retry begun and ended, a rejoin's revoke, restore and serve: one line each
# (a retry said every 5 s would pass it within the outage).
WORKER_MOST_LINES = 8


def broker(command: str) -> None:
    env = {
        **os.environ,
        "STALLWATCH_KAFKA_PORT": str(PORT),
        "STALLWATCH_KAFKA_CONTROLLER_PORT": str(PORT + 1),
    }
    subprocess.run([str(ROOT / "deploy/kafka/kafka.sh"), command], check=True, timeout=300, env=env)


def settings() -> Settings:
    return Settings(
        bootstrap=f"127.0.0.1:{PORT}",
        topic_prefix=f"t{uuid.uuid4().hex[:10]}",
        partitions=2,
        replication_factor=1,
        min_insync_replicas=1,
    )


async def test_a_worker_says_an_outage_in_a_few_lines():
    broker("up")
    config = settings()
    worker = WorkerProcess(config, env={"STALLWATCH_LOG_SUMMARY_S": str(SUMMARY_S)})
    try:
        await wait_until_serving(config, timeout_s=120)
        log_now = worker.log_path.read_bytes()
        before, said_before = log_now.count(b"\n"), len(log_now)
        broker("down")
        down_at = time.monotonic()
        await asyncio.sleep(OUTAGE_S)  # the thing under test: an outage that lasts OUTAGE_S
        assert worker.alive(), worker.log_tail()
        broker("up")
        await wait_until_serving(config, timeout_s=120)
        await until(
            lambda: b"Kafka answers again" in worker.log_path.read_bytes()[said_before:],
            60,
            lambda: f"the worker's line that ends the episode:\n{worker.log_tail()}",
            interval_s=0.2,
        )
        lines = [orjson.loads(line) for line in worker.log_path.read_bytes().splitlines()[before:]]
        lasted = time.monotonic() - down_at
    finally:
        worker.stop()
        broker("down")
    said = "\n".join(f"{e['level']} {e['logger']} {e['msg']}" for e in lines)
    trouble = [e for e in lines if e["logger"] == "stallwatch.kafka.trouble"]
    # Every aiokafka complaint folded: none of its own lines pass.
    assert not [e for e in lines if e["logger"].startswith("aiokafka")], said
    # Noticed, a summary every SUMMARY_S while the episode lasts, over.
    assert len(trouble) <= 2 + math.ceil(lasted / SUMMARY_S), said
    assert len(lines) - len(trouble) <= WORKER_MOST_LINES, said
    assert "Kafka trouble for" in trouble[0]["msg"]
    assert any("goes on" in e["msg"] for e in trouble)
    assert "Kafka answers again" in trouble[-1]["msg"] and "lines folded" in trouble[-1]["msg"]


def answered_again(records: list[logging.LogRecord]) -> bool:
    said = "\n".join(r.getMessage() for r in records)
    return "Kafka answers again" in said and "the broker answers again" in said


async def test_a_kafka_client_says_an_outage_in_a_few_lines(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    broker("up")
    config = settings()
    await ensure_topics(config)
    client = KafkaClient(config)  # the default verdict timeout: a loaded machine is slow to answer
    trouble = tame_kafka_loggers()  # the process's one filter, which the client installs too
    caplog.clear()
    try:
        await client.start()
        run = await client.start_run("outage-1", "researcher", [{"name": "search"}])
        await run.start_round()
        broker("down")
        deadline = time.monotonic() + OUTAGE_S
        i = 0
        while time.monotonic() < deadline:  # an agent that keeps calling through the outage
            i += 1
            _, decision = await run.propose("search", {"q": i})
            assert decision.allowed
            await asyncio.sleep(0.5)  # the thing under test: an agent calling at its pace
        broker("up")
        await until(lambda: client.connected, 60, "the client connected again", interval_s=0.1)
        # The episode's last line: the folded Kafka summary closes after its quiet time.
        await until(
            lambda: trouble.episode is None and answered_again(caplog.records),
            60,
            "the client's and the folded Kafka summary's lines that the broker is back",
            interval_s=0.1,
        )
    finally:
        await client.stop()
        broker("down")
    said = [f"{r.levelname} {r.name} {r.getMessage()}" for r in caplog.records if r.levelno >= logging.INFO]
    assert len(said) <= MOST_LINES, "\n".join(said[:40])
    # A line when it goes and one when it is back, from the client itself.
    assert any("every call is allowed" in line for line in said), "\n".join(said)
    assert any("the broker answers again" in line for line in said), "\n".join(said)


async def test_a_worker_stopped_during_an_outage_exits_without_a_traceback():
    broker("up")
    config = settings()
    worker = WorkerProcess(config)
    try:
        await wait_until_serving(config, timeout_s=120)
        said_before = len(worker.log_path.read_bytes())
        broker("down")
        # Into the outage: the consumer's fetches fail and are retried, and the worker says so.
        await until(
            lambda: b"Kafka trouble for" in worker.log_path.read_bytes()[said_before:],
            60,
            lambda: f"the worker's line that an outage began:\n{worker.log_tail()}",
            interval_s=0.2,
        )
        assert worker.alive(), worker.log_tail()
        worker.proc.terminate()
        code = await asyncio.to_thread(worker.proc.wait, 30)
    finally:
        worker.stop()
        broker("down")
    log = worker.log_path.read_text(errors="replace")
    assert "Traceback" not in log, worker.log_tail()
    assert code in (0, 4), (code, worker.log_tail())  # 4: a stop cut short, its events read again
