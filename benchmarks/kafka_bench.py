"""The worker against a bare aiokafka echo, side by side on the same broker.

    python benchmarks/kafka_bench.py [--runs 200] [--rate 300] [--seconds 15] [--log-runs 1000]
                                     [--recovery-runs 100000]

(a) decision latency: `call_proposed` produced to its verdict received, p50/p99, under a steady
    load of many concurrent runs; the floor is an echo (a consumer that answers every message
    on a reply topic, batch by batch, as the worker does).
(b) sustained events/s of one worker on a fleet log, against the echo on the same log.
(c) recovery: a worker whose table holds N runs is killed with SIGKILL; the time until a new
    worker has restored the table and answers again.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fleet_log import fleet_events
from stallwatch.contract.envelope import envelope
from stallwatch.kafka.topics import ensure_topics
from stallwatch.logs import configure as configure_logging
from tests.kafka_harness import (
    WorkerProcess,
    fresh_settings,
    kafka,
    replay_commands,
    wait_until_serving,
)


async def echo(bootstrap: str, source: str, reply: str) -> None:
    """The floor: read a batch, answer each message on the reply topic, await the acks."""
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=f"echo-{source}",
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await consumer.start()
    await producer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=100, max_records=500)
            sends = [await producer.send(reply, r.value, key=r.key)
                     for records in batches.values() for r in records]
            if sends:
                await asyncio.gather(*sends)
    finally:
        await consumer.stop()
        await producer.stop()


class Echo:
    def __init__(self, settings) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "echo", settings.bootstrap,
                                      settings.events_topic, settings.commands_topic])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1]


async def latency(settings, runs: int, rate: float, seconds: float) -> list[float]:
    """Steady load: `rate` calls/s spread over `runs` runs; returns seconds per verdict."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(settings.commands_topic, bootstrap_servers=settings.bootstrap,
                                auto_offset_reset="latest", fetch_max_wait_ms=10,
                                isolation_level="read_committed")
    await producer.start()
    await consumer.start()
    await consumer.getmany(timeout_ms=500)  # join: position at the end before sending
    sent: dict[str, float] = {}
    took: list[float] = []
    tag = uuid.uuid4().hex[:6]
    ids = [f"lat-{tag}-{i}" for i in range(runs)]
    for run_id in ids:
        event = envelope("run_started", run_id, f"{run_id}-s", mode="chat", tools=[{"name": "t"}])
        await producer.send(settings.events_topic, orjson.dumps(event), key=run_id.encode())
    await producer.flush()

    async def receive() -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for records in batches.values():
                for r in records:
                    caused_by = orjson.loads(r.value).get("caused_by") or orjson.loads(r.value)["event_id"]
                    start = sent.pop(caused_by, None)
                    if start is not None:
                        took.append(now - start)

    reader = asyncio.create_task(receive())
    interval, n, begin = 1.0 / rate, 0, time.perf_counter()
    while time.perf_counter() - begin < seconds:
        run_id = ids[n % runs]
        event_id = f"{run_id}-{n}"
        event = envelope("call_proposed", run_id, event_id, round=1 + n // runs, call_id=f"c{n}",
                         tool="t", args={"n": n})
        sent[event_id] = time.perf_counter()
        await producer.send(settings.events_topic, orjson.dumps(event), key=run_id.encode())
        n += 1
        await asyncio.sleep(max(0.0, begin + n * interval - time.perf_counter()))
    await asyncio.sleep(2)
    reader.cancel()
    await producer.stop()
    await consumer.stop()
    return took


async def throughput(settings, log: list[bytes], replies: int) -> float:
    """Events/s: the whole log produced at once, until the last reply arrived."""
    consumer = AIOKafkaConsumer(settings.commands_topic, bootstrap_servers=settings.bootstrap,
                                auto_offset_reset="latest", fetch_max_wait_ms=10,
                                isolation_level="read_committed")
    await consumer.start()
    await consumer.getmany(timeout_ms=500)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5,
                                max_batch_size=1 << 20)
    await producer.start()
    begin = time.perf_counter()
    for line in log:
        await producer.send(settings.events_topic, line, key=orjson.loads(line)["run_id"].encode())
    await producer.flush()
    got = 0
    while got < replies and time.perf_counter() - begin < 600:
        batches = await consumer.getmany(timeout_ms=500)
        got += sum(len(r) for r in batches.values())
    elapsed = time.perf_counter() - begin
    await producer.stop()
    await consumer.stop()
    assert got >= replies, f"only {got} of {replies} replies"
    return len(log) / elapsed


async def recovery(runs: int, standby: bool) -> tuple[float, str]:
    """Fill a worker with `runs` live runs, SIGKILL it, and time until its runs answer again:
    restarted at once under the same instance id (static membership, as a StatefulSet restarts a
    pod), or taken over by a second worker that was running beside it (`standby`)."""
    settings = fresh_settings(partitions=4)
    worker = WorkerProcess(settings, "fill", env={"STALLWATCH_INSTANCE_ID": "bench-0"})
    survivor = WorkerProcess(settings, "survivor") if standby else None
    await wait_until_serving(settings)
    if survivor is not None:
        await survivor.ready()
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=20,
                                max_batch_size=1 << 20)
    await producer.start()
    for i in range(runs):
        run_id = f"rec-{i}"
        event = envelope("run_started", run_id, f"{run_id}-s", mode="researcher",
                         tools=[{"name": "search"}])
        await producer.send(settings.events_topic, orjson.dumps(event), key=run_id.encode())
    await producer.stop()
    await wait_until_answering_all(settings, timeout_s=600)  # probes queue behind the whole fill
    killed = worker.kill_time()
    if survivor is None:
        worker = WorkerProcess(settings, "recover", env={"STALLWATCH_INSTANCE_ID": "bench-0"})
    # The probes hash to every partition, the killed worker's included.
    await wait_until_answering_all(settings, timeout_s=600)
    elapsed = time.perf_counter() - killed
    timeline = recovery_timeline((survivor or worker).log_path.read_text())
    for w in (worker, survivor):
        if w is not None:
            w.stop()
    return elapsed, timeline


async def wait_until_answering_all(settings, timeout_s: float) -> None:
    """A probe per partition, all at once; returns when every one was answered."""
    await asyncio.gather(*(wait_until_serving(settings, timeout_s, partition=p)
                           for p in range(settings.partitions)))


def recovery_timeline(log: str) -> str:
    """The restores the worker logged after the kill."""
    restores = [line.split(" INFO ")[-1] for line in log.splitlines() if "restored" in line]
    return "; ".join(restores[-2:]) or "no restore found in the worker log"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--log-runs", type=int, default=1000)
    parser.add_argument("--recovery-runs", type=int, default=100_000)
    parser.add_argument("--only", choices=["all", "recovery"], default="all")
    args = parser.parse_args()
    kafka("up")
    if args.only == "recovery":
        await report_recovery(args.recovery_runs)
        return
    log = [orjson.dumps(e) for e in fleet_events(args.log_runs, seed=11, live=200)]
    commands = len(replay_commands(log))
    print(f"broker {os.environ.get('STALLWATCH_BOOTSTRAP', '127.0.0.1:9092')}; 4 partitions; "
          f"load: {args.runs} runs, {args.rate:g} calls/s for {args.seconds:g} s; "
          f"log: {len(log):,} events of {args.log_runs} runs -> {commands:,} commands")
    results = {}
    for name in ("echo", "worker", "2 workers"):
        settings = fresh_settings(partitions=4)
        await ensure_topics(settings)
        services: list = []
        if name == "echo":
            services.append(Echo(settings))
            await asyncio.sleep(3)
        else:
            services.append(WorkerProcess(settings, "bench"))
            await wait_until_serving(settings)
            if name == "2 workers":
                services.append(WorkerProcess(settings, "bench2"))
                await services[-1].ready()
                await asyncio.sleep(2)  # the group has settled on two members
        try:
            took = await latency(settings, args.runs, args.rate, args.seconds)
            rate = await throughput(settings, log, len(log) if name == "echo" else commands)
        finally:
            for service in services:
                service.stop()
        results[name] = (quantile(took, 0.5) * 1e3, quantile(took, 0.99) * 1e3, len(took), rate)
        p50, p99, n, eps = results[name]
        print(f"{name:<9} latency p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  ({n:,} verdicts)   "
              f"throughput {eps:9,.0f} events/s", flush=True)
    (_, e99, _, e_eps), (_, w99, _, w_eps) = results["echo"], results["worker"]
    print(f"worker/echo: p99 latency {w99 / e99:.2f}x (target <= 1.5), "
          f"throughput {w_eps / e_eps:.2f}x (target >= 0.5); two workers / one: "
          f"{results['2 workers'][3] / w_eps:.2f}x throughput on this machine's 2 cores")
    if args.recovery_runs:
        await report_recovery(args.recovery_runs)


async def report_recovery(runs: int) -> None:
    for standby, how in ((False, "restarted under the same instance id"),
                         (True, "taken over by a second worker")):
        elapsed, restored = await recovery(runs, standby)
        print(f"recovery: {runs:,} live runs; SIGKILL, {how}: its runs answered again after "
              f"{elapsed:.1f} s (target < 5 s)\n  {restored}")


if __name__ == "__main__":
    configure_logging("WARNING")  # the figures on stdout; only what goes wrong on stderr
    if len(sys.argv) > 1 and sys.argv[1] == "echo":
        asyncio.run(echo(*sys.argv[2:5]))
    else:
        asyncio.run(main())
