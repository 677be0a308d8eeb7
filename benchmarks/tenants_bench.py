"""A decision worker across many tenants, under each transaction model (docs/tenants.md): the
partition model (a consumer group per tenant, a transactional producer per input partition) is
the baseline the group model (tenant groups on librdkafka, one transaction per group) is
measured against, side by side in one run.

For each tenant count: the tenants' topics made (`stallwatch tenants add`), one worker started and
timed until it serves them all (`/health/ready`), its idle CPU and open sockets, then light
traffic spread over every tenant (a call every so often per tenant, each through its own topic):
the worker's CPU per call and the verdict latency; then a second worker joins under the same
traffic: its time to ready and the longest gap between two verdicts of one tenant meanwhile.

    python benchmarks/tenants_bench.py --tenants 1 10 100 --partitions 2 --rate 100 --seconds 20 \
        --models partition group
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kafka_bench import cpu_seconds, open_sockets
from stallwatch.contract.envelope import envelope
from stallwatch.settings import Settings
from tests.kafka_harness import WorkerProcess, fresh_settings, run_cli

READY_TIMEOUT_S = 600.0


async def until_ready(worker: WorkerProcess) -> float:
    began = time.monotonic()
    while await asyncio.to_thread(worker.health) != 200:
        if not worker.alive() or time.monotonic() - began > READY_TIMEOUT_S:
            raise RuntimeError(f"worker not ready:\n{worker.log_tail()}")
        await asyncio.sleep(0.2)
    return time.monotonic() - began


class Traffic:
    """Calls spread round robin over the tenants, one run per tenant; each call's verdict timed
    from its send to its arrival, and the gaps between one tenant's verdicts."""

    def __init__(self, tenants: list[Settings], rate: float) -> None:
        self.tenants, self.rate = tenants, rate
        self.sent: dict[str, float] = {}
        self.latencies_ms: list[float] = []
        self.last_verdict: dict[str, float] = {}
        self.longest_gap_s = 0.0
        self.calls = 0
        self._stop = asyncio.Event()

    async def run(self, seconds: float) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.tenants[0].bootstrap, linger_ms=0)
        await producer.start()
        try:
            for tenant in self.tenants:
                run_id = f"run-{tenant.tenant}"
                start = envelope("run_started", run_id, mode="researcher", tools=[{"name": "search"}])
                await producer.send(tenant.events_topic, orjson.dumps(start), key=run_id.encode())
            began, first = time.monotonic(), self.calls
            while time.monotonic() - began < seconds:
                tenant = self.tenants[self.calls % len(self.tenants)]
                run_id, call_id = f"run-{tenant.tenant}", f"c{self.calls}"
                call = envelope(
                    "call_proposed", run_id, round=1, call_id=call_id, tool="search", args={"q": self.calls}
                )
                self.sent[call_id] = time.monotonic()
                await producer.send(tenant.events_topic, orjson.dumps(call), key=run_id.encode())
                self.calls += 1
                await asyncio.sleep(max(0.0, began + (self.calls - first) / self.rate - time.monotonic()))
        finally:
            await producer.stop()

    async def read(self) -> None:
        consumer = AIOKafkaConsumer(
            *[t.commands_topic for t in self.tenants],
            bootstrap_servers=self.tenants[0].bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="latest",
        )
        await consumer.start()
        try:
            while not self._stop.is_set():
                for tp, records in (await consumer.getmany(timeout_ms=100)).items():
                    now = time.monotonic()
                    for record in records:
                        sent = self.sent.pop(orjson.loads(record.value).get("call_id", ""), None)
                        if sent is not None:
                            self.latencies_ms.append((now - sent) * 1000)
                    previous = self.last_verdict.get(tp.topic)
                    if previous is not None:
                        self.longest_gap_s = max(self.longest_gap_s, now - previous)
                    self.last_verdict[tp.topic] = now
        finally:
            await consumer.stop()

    def stop(self) -> None:
        self._stop.set()


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values or [0.0])[0]


async def measure(tenants: int, partitions: int, rate: float, seconds: float, model: str) -> dict[str, float]:
    settings = fresh_settings(partitions)
    names = [f"t{n}" for n in range(tenants)]
    for first in range(0, tenants, 50):
        made = await asyncio.to_thread(run_cli, settings, "tenants", "add", *names[first : first + 50])
        assert made.returncode == 0, made.stderr
    each = [settings.for_tenant(name) for name in names]
    env = {"STALLWATCH_TENANT_SCAN_INTERVAL_S": "2", "STALLWATCH_TRANSACTION_MODEL": model}
    first_worker = WorkerProcess(settings, "first", env)
    second = None
    try:
        ready_s = await until_ready(first_worker)
        idle_before = cpu_seconds(first_worker.proc.pid)
        await asyncio.sleep(10)  # idle: nothing sent
        idle = (cpu_seconds(first_worker.proc.pid) - idle_before) / 10
        sockets = open_sockets(first_worker.proc.pid)
        traffic = Traffic(each, rate)
        reading = asyncio.create_task(traffic.read())
        await asyncio.sleep(1)  # the reader placed at the end of every commands topic
        busy_before = cpu_seconds(first_worker.proc.pid)
        await traffic.run(seconds)
        await asyncio.sleep(2)  # the last verdicts in
        per_call_us = (cpu_seconds(first_worker.proc.pid) - busy_before) / max(1, traffic.calls) * 1e6
        latencies = list(traffic.latencies_ms)
        traffic.longest_gap_s = 0.0
        traffic.last_verdict.clear()  # gaps within the join's traffic only
        joining = asyncio.create_task(traffic.run(seconds * 3))
        second = WorkerProcess(settings, "second", env)
        join_s = await until_ready(second)
        await joining
        traffic.stop()
        await reading
    finally:
        first_worker.stop()
        if second is not None:
            second.stop()
    return {
        "ready_s": ready_s,
        "idle_cpu": idle * 100,
        "sockets": sockets,
        "per_call_us": per_call_us,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "join_s": join_s,
        "gap_s": traffic.longest_gap_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100.0, help="calls a second over all tenants")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--models", nargs="+", default=["partition", "group"], choices=["partition", "group"])
    args = parser.parse_args()
    print(f"{args.rate:g} calls/s spread over every tenant (each of {args.partitions} partitions)")
    print(
        "model      tenants  served in  idle CPU  sockets  CPU/call  verdict p50 / p99   "
        "second ready  longest gap"
    )
    for tenants in args.tenants:
        for model in args.models:
            r = asyncio.run(measure(tenants, args.partitions, args.rate, args.seconds, model))
            print(
                f"{model:<9}  {tenants:>7}  {r['ready_s']:7.1f} s  {r['idle_cpu']:6.1f} %  "
                f"{r['sockets']:7.0f}  "
                f"{r['per_call_us']:6.0f} µs  {r['p50']:6.1f} / {r['p99']:6.1f} ms  {r['join_s']:9.1f} s  "
                f"{r['gap_s']:8.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
