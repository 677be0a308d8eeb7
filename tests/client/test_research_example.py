"""examples/research_agent.py as a user runs it: stopped in process and through a worker, and one
line and a non-zero exit with no broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_harness import free_port, serving_worker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "research_agent.py"


def example(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STALLWATCH_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
    )


def test_the_example_is_stopped_in_process():
    done = example()
    assert done.returncode == 0, done.stderr
    assert "stopped at round 6 (no_new_facts" in done.stdout


def test_the_example_with_no_broker_ends_in_one_line():
    done = example("--kafka", env={"STALLWATCH_BOOTSTRAP": f"127.0.0.1:{free_port()}"})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "no broker answers" in line and "STALLWATCH_BOOTSTRAP" in line


@pytest.mark.kafka
async def test_the_example_is_stopped_through_a_worker():
    async with serving_worker(partitions=2) as (settings, _):
        env = {
            "STALLWATCH_BOOTSTRAP": settings.bootstrap,
            "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
            "STALLWATCH_PARTITIONS": "2",
        }
        done = example("--kafka", env=env)
    assert done.returncode == 0, done.stderr
    assert "stopped at round 6 (no_new_facts" in done.stdout
