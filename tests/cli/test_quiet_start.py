"""`stallwatch demo` (`make run`) and the Kafka and fleet benchmarks (`make bench`) start and stop
with no warning line on a healthy broker, and what the demo's worker says does reach its stderr
(a fault is seen)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.kafka_harness import BOOTSTRAP, ROOT

pytestmark = pytest.mark.kafka


def run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    kept = {k: v for k, v in os.environ.items() if k not in ("STALLWATCH_LOG_LEVEL", "STALLWATCH_LOG_FORMAT")}
    env = {
        **kept,
        "STALLWATCH_BOOTSTRAP": BOOTSTRAP,
        "STALLWATCH_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}",
        "STALLWATCH_REPLICATION_FACTOR": "1",
        "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
    }
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=ROOT)


def test_the_demo_says_nothing_on_stderr_when_all_is_well():
    result = run([sys.executable, "-m", "stallwatch.cli.main", "demo"], 300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "stopped at round" in result.stdout  # the worker answered: the demo really ran


def test_the_demos_worker_speaks_on_the_demos_stderr():
    code = (
        "import subprocess\nfrom stallwatch.cli import demo\nfrom stallwatch.settings import Settings\n"
        "worker = demo.start_worker(Settings(bootstrap='127.0.0.1:1', topic_prefix='nowhere'))\n"
        "worker.wait(60)"
    )
    result = run([sys.executable, "-c", code], 120)
    assert "STALLWATCH_BOOTSTRAP" in result.stderr  # the worker's own error, not swallowed


def figures_and_no_warning(result: subprocess.CompletedProcess, figure: str) -> None:
    """A benchmark that exited 0, printed `figure` on stdout and nothing on stderr but the local
    broker's own `kafka: ...` lines."""
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if not line.startswith("kafka: ")]
    assert said == []
    assert figure in result.stdout


def test_the_kafka_bench_prints_figures_and_no_warning():
    result = run(
        [
            sys.executable,
            "benchmarks/kafka_bench.py",
            "--runs",
            "10",
            "--rate",
            "40",
            "--seconds",
            "2",
            "--log-runs",
            "20",
            "--recovery-runs",
            "0",
        ],
        600,
    )
    figures_and_no_warning(result, "throughput")


def test_the_fleet_bench_prints_figures_and_no_warning():
    result = run(
        [
            sys.executable,
            "benchmarks/fleet_bench.py",
            "--rate",
            "2000",
            "--seconds",
            "6",
            "--runs",
            "50",
            "--keys",
            "200",
        ],
        600,
    )
    figures_and_no_warning(result, "crossing tally to advisory")
