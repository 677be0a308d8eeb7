"""`stallwatch top` on the real broker: counts of a known commands topic."""

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


async def test_top_counts_stops_per_code_and_verdicts_per_tool():
    settings = fresh_settings(partitions=3)
    await ensure_topics(settings)
    commands = replay_commands(interleave(every_rule()))
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
    await producer.start()
    # Every command twice, as after a worker's restart (published ahead, then again): counted once.
    for raw in commands * 2:
        await producer.send(settings.commands_topic, raw, key=b"k" + raw[-3:])
    await producer.stop()
    env = {
        **os.environ,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
    }
    done = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "top", "--once", "--from-beginning"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["open incidents: 0", "stops: 7   nudges: 1"]
    assert "  tool_failures           2" in lines
    assert "  no_new_facts            1" in lines
    price = next(line for line in lines if line.strip().startswith("price "))
    assert price.split()[1:3] == ["2", "0"]  # allowed 2, no budget refusals
    assert "stopped for failing: " in done.stdout and "price 1" in done.stdout


async def test_top_lists_the_open_incidents_of_the_compacted_topic():
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)
    opened = {
        "v": 1,
        "incident_id": "inc-a",
        "state": "open",
        "kind": "tool_failing",
        "tenant": "acme",
        "tool": "search",
        "opened_window_start": 1_700_000_000.0,
        "opened_at": 1_700_000_300.0,
        "last_held_at": 1_700_000_300.0,
        "closed_at": None,
        "window_s": 300.0,
        "evidence": {"calls": 40, "failures": 31, "runs": 12},
        "advised_runs": 12,
    }
    records = [
        (b"inc-a", orjson.dumps(opened)),
        (b"inc-b", orjson.dumps({**opened, "incident_id": "inc-b", "tool": "fetch"})),
        (
            b"inc-b",
            orjson.dumps(
                {
                    **opened,
                    "incident_id": "inc-b",
                    "tool": "fetch",
                    "state": "closed",
                    "closed_at": 1_700_000_600.0,
                }
            ),
        ),
        (b"inc-c", orjson.dumps({**opened, "incident_id": "inc-c", "tool": "lookup"})),
        (b"inc-c", None),
    ]
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
    await producer.start()
    for key, value in records:
        await producer.send(settings.incidents_topic, value, key=key)
    await producer.stop()
    env = {
        **os.environ,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
    }
    done = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "top", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "open incidents: 1"
    assert lines[1].split() == [
        "tool_failing",
        "search",
        "tenant",
        "acme",
        "opened",
        "22:18:20",
        "UTC",
        "calls",
        "40,",
        "failures",
        "31,",
        "runs",
        "12",
    ]


async def test_top_refuses_two_different_commands_under_one_id():
    settings = fresh_settings(partitions=1)
    await ensure_topics(settings)
    raw = replay_commands(interleave(every_rule()))[0]
    await publish_two_contents(settings, raw, key=b"k")
    done = run_cli(settings, "top", "--once", "--from-beginning")
    assert done.returncode == 1 and "two different commands share id" in done.stderr
