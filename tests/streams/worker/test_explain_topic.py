"""`stallwatch explain RUN_ID` without a file: the run's commands from its commands partition."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import fresh_settings, publish_two_contents, replay_commands, run_cli
from tests.streams.worker.fleet_logs import every_rule, interleave

pytestmark = pytest.mark.kafka


async def test_explain_reads_the_runs_commands_from_the_topic():
    settings = fresh_settings(partitions=4)
    await ensure_topics(settings)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
    await producer.start()
    # Every command twice, as after a worker's restart (published ahead, then again): shown once.
    for raw in replay_commands(interleave(every_rule())) * 2:
        await producer.send(settings.commands_topic, raw, key=orjson.loads(raw)["run_id"].encode())
    await producer.stop()
    env = {
        **os.environ,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
    }

    def explain(run_id: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "stallwatch.cli.main", "explain", run_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = explain("looper")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["round 1", "  allowed search"]
    assert (
        "  nudge: Nothing new has come back for 3 rounds: every result was one you had seen. "
        "Change the approach, or answer from what you have." in lines
    )
    assert (
        sum(line.startswith("  STOP at round 6 [no_new_facts, answer_without_tools]") for line in lines) == 1
    )
    assert lines.count("round 1") == 1
    assert "pager" not in done.stdout
    missing = explain("nobody")
    assert missing.returncode == 1 and "no command of run 'nobody'" in missing.stdout


async def test_explain_refuses_two_different_commands_under_one_id():
    settings = fresh_settings(partitions=1)
    await ensure_topics(settings)
    raw = next(r for r in replay_commands(interleave(every_rule())) if b'"looper"' in r)
    await publish_two_contents(settings, raw, key=b"looper")
    done = run_cli(settings, "explain", "looper")
    assert done.returncode == 1 and "two different commands share id" in done.stderr
