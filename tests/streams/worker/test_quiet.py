"""A healthy worker is quiet on the real broker: no retried refusals in steady running, next to
no CPU when idle."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.kafka_harness import WorkerProcess, fresh_settings, produce, wait_until_serving
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka

# An idle worker measured 0.3-0.6% of a core, and up to 4.2% on a loaded machine since every
# client renews its metadata every 3 s; polling the broker every 5 ms cost ~9%.
IDLE_CPU_BOUND = 0.05
# Long enough that the periodic work (tenant scans every 10 s, metadata every 3 s) averages out:
# over 15 s the bound failed.
IDLE_S = 60.0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (/proc/<pid>/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_steady_running_on_a_healthy_broker_logs_no_not_enough_replicas():
    settings = fresh_settings(partitions=4)
    # Every aiokafka line as it comes: a retried refusal must not hide in a folded summary.
    worker = WorkerProcess(settings, "steady", env={"STALLWATCH_LOG_KAFKA": "raw"})
    try:
        await wait_until_serving(settings)
        log = interleave(mixed_fleet(100))
        await produce(settings, log, pause_every=80, pause_s=0.1)
        # Every event read and its batch committed (counted after the commit), beside the probe's.
        await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= len(log) + 1)
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    refusals = [line for line in worker.log_path.read_text().splitlines() if "NotEnoughReplicas" in line]
    assert not refusals, f"{len(refusals)} lines, e.g. {refusals[:2]}"


@pytest.mark.solo
async def test_an_idle_worker_uses_next_to_no_cpu():
    settings = fresh_settings(partitions=4)
    worker = WorkerProcess(settings, "idle")
    try:
        await wait_until_serving(settings)
        await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= 1)  # the probe's batch
        cpu, began = cpu_seconds(worker.proc.pid), time.monotonic()
        await asyncio.sleep(IDLE_S)  # the thing under test: what an idle worker spends over this time
        share = (cpu_seconds(worker.proc.pid) - cpu) / (time.monotonic() - began)
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    assert share < IDLE_CPU_BOUND, f"{share:.1%} of a core"
