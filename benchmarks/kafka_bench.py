"""The worker against a bare transactional echo of its model, side by side on the same broker.

    python benchmarks/kafka_bench.py [--model partition|group] [--runs 200] [--rate 300]
                                     [--seconds 15] [--slices 6] [--warmup 5]
                                     [--log-runs 1000]
                                     [--recovery-runs 100000] [--pin]

`--model`: the workers' STALLWATCH_TRANSACTION_MODEL, and the echo's (benchmarks/model_echo.py:
the model's clients and transactions, every message answered ahead of its transaction, no
engine).

`--pin`: the echo and the worker on the last core, every thread of theirs, and the broker and
this process (the load and its reader) on the others, so a service's CPU does not slow the broker
and the client its verdicts pass through (on two cores, the services get one).

(a) decision latency: `call_proposed` produced to its verdict received, p50/p99, under a steady
    load of many concurrent runs; the floor is the echo. The echo and one worker serve at once,
    each on its own topics, and the load goes to one, then the other, in `--slices` turns of
    `--seconds / --slices` each, after a first turn of `--warmup` seconds each that is not
    counted: both meet the broker's and the machine's bursts alike, where
    one after the other they met different ones (the echo's own p99 moved 3.5-31 ms between
    runs). Printed side by side with the CPU time per event of the worker (or echo), the broker
    and the client (this process), each read from /proc/<pid>/stat (utime+stime) before and
    after each turn, at that load and at (b)'s. At `--rate 300` a p99 rests on 3 samples a
    second above it: `--seconds 90` gives ~270.
(b) sustained events/s of one worker on a fleet log, against the echo on the same log.
(c) recovery: a worker whose table holds N runs is killed with SIGKILL; the time until a new
    worker has restored the table and answers again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
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
from stallwatch.settings import Settings
from stallwatch_streams.worker.confluent.consumer import SESSION_TIMEOUT_MS as GROUP_SESSION_TIMEOUT_MS
from stallwatch_streams.worker.pipeline import SESSION_TIMEOUT_MS
from tests.kafka_harness import (
    WorkerProcess,
    fresh_settings,
    kafka,
    replay_commands,
    wait_until_serving,
)


class Echo:
    """The floor: a bare transactional echo of the worker's model (benchmarks/model_echo.py)."""

    def __init__(self, settings, model: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("model_echo.py")),
                model,
                settings.bootstrap,
                settings.events_topic,
                settings.commands_topic,
                settings.changelog_topic,
                f"echo-{settings.events_topic}",
            ]
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process so far (children not included), from /proc/<pid>/stat."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


def open_sockets(pid: int) -> int:
    """The sockets a process holds open, from /proc/<pid>/fd."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed while listed
            count += os.readlink(fd).startswith("socket:")
    return count


def broker_pid() -> int | None:
    """The local broker's pid, from the pid file deploy/kafka/kafka.sh writes."""
    port = os.environ.get("STALLWATCH_KAFKA_PORT", "9092")
    pidfile = Path(__file__).resolve().parents[1] / ".cache" / "kafka-data" / port / "kafka.pid"
    try:
        return int(pidfile.read_text())
    except (OSError, ValueError):
        return None


class CpuMeter:
    """CPU seconds per event of named processes over a phase (None for one that is not known)."""

    def __init__(self, pids: dict[str, list[int | None]]) -> None:
        self.pids = pids
        self.before = {name: self._total(p) for name, p in pids.items()}

    @staticmethod
    def _total(pids: list[int | None]) -> float | None:
        try:
            return sum(cpu_seconds(pid) for pid in pids if pid is not None) if all(pids) else None
        except OSError:
            return None

    def per_event(self, events: int) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name, pids in self.pids.items():
            before, after = self.before[name], self._total(pids)
            out[name] = None if before is None or after is None else (after - before) / events
        return out


def micros(per_event: dict[str, float | None]) -> str:
    return " / ".join("-" if v is None else f"{v * 1e6:5.0f}" for v in per_event.values())


# The worker's histograms printed after the latency load: where a verdict's time goes.
INTERNALS = (
    ("fetch delay", "stallwatch_fetch_delay_seconds", 1e3),
    ("batch", "stallwatch_batch_processing_seconds", 1e3),
    ("decision", "stallwatch_decision_latency_seconds", 1e3),
    ("events/batch", "stallwatch_batch_events", 1.0),
)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus's histogram_quantile: linear within the bucket holding the q-th observation."""
    total = buckets[-1][1]
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


def internals(metrics_port: int) -> str:
    """p50/p90/p99 of the worker's own histograms, scraped from its metrics port."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    out = []
    for label, name, scale in INTERNALS:
        buckets = [
            (float(le), float(v))
            for le, v in re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text.decode(), re.M)
        ]
        if not buckets or buckets[-1][1] == 0:
            continue
        qs = "/".join(f"{histogram_quantile(buckets, q) * scale:.1f}" for q in (0.5, 0.9, 0.99))
        out.append(f"{label} {qs}")
    return "  worker p50/p90/p99 (ms; buckets interpolated): " + "; ".join(out)


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1]


async def latency(
    settings, runs: int, rate: float, seconds: float, pids: dict[str, list[int | None]]
) -> tuple[list[float], dict[str, float | None]]:
    """Steady load: `rate` calls/s spread over `runs` runs; returns seconds per verdict and the
    CPU seconds per event of `pids` over the load."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        settings.commands_topic,
        bootstrap_servers=settings.bootstrap,
        auto_offset_reset="latest",
        fetch_max_wait_ms=10,
        isolation_level="read_committed",
    )
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
    meter = CpuMeter(pids)

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
        event = envelope(
            "call_proposed", run_id, event_id, round=1 + n // runs, call_id=f"c{n}", tool="t", args={"n": n}
        )
        sent[event_id] = time.perf_counter()
        await producer.send(settings.events_topic, orjson.dumps(event), key=run_id.encode())
        n += 1
        await asyncio.sleep(max(0.0, begin + n * interval - time.perf_counter()))
    await asyncio.sleep(2)
    cpu = meter.per_event(n)
    reader.cancel()
    await producer.stop()
    await consumer.stop()
    return took, cpu


async def throughput(
    settings, log: list[bytes], replies: int, pids: dict[str, list[int | None]]
) -> tuple[float, dict[str, float | None]]:
    """Events/s: the whole log produced at once, until the last reply arrived; and the CPU
    seconds per event of `pids` meanwhile."""
    consumer = AIOKafkaConsumer(
        settings.commands_topic,
        bootstrap_servers=settings.bootstrap,
        auto_offset_reset="latest",
        fetch_max_wait_ms=10,
        isolation_level="read_committed",
    )
    await consumer.start()
    await consumer.getmany(timeout_ms=500)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5, max_batch_size=1 << 20
    )
    await producer.start()
    meter = CpuMeter(pids)
    begin = time.perf_counter()
    for line in log:
        await producer.send(settings.events_topic, line, key=orjson.loads(line)["run_id"].encode())
    await producer.flush()
    got = 0
    while got < replies and time.perf_counter() - begin < 600:
        batches = await consumer.getmany(timeout_ms=500)
        got += sum(len(r) for r in batches.values())
    elapsed = time.perf_counter() - begin
    cpu = meter.per_event(len(log))
    await producer.stop()
    await consumer.stop()
    assert got >= replies, f"only {got} of {replies} replies"
    return len(log) / elapsed, cpu


async def recovery(runs: int, standby: bool, model: str) -> tuple[float, str]:
    """Fill a worker with `runs` live runs, SIGKILL it, and time until its runs answer again:
    restarted at once under the same instance id (static membership, as a StatefulSet restarts a
    pod), or taken over by a second worker that was running beside it (`standby`)."""
    settings = fresh_settings(partitions=4)
    env = {"STALLWATCH_TRANSACTION_MODEL": model}
    worker = WorkerProcess(settings, "fill", env={**env, "STALLWATCH_INSTANCE_ID": "bench-0"})
    survivor = WorkerProcess(settings, "survivor", env) if standby else None
    await wait_until_serving(settings)
    if survivor is not None:
        await survivor.ready()
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap, acks="all", linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    for i in range(runs):
        run_id = f"rec-{i}"
        event = envelope("run_started", run_id, f"{run_id}-s", mode="researcher", tools=[{"name": "search"}])
        await producer.send(settings.events_topic, orjson.dumps(event), key=run_id.encode())
    await producer.stop()
    await wait_until_answering_all(settings, timeout_s=600)  # probes queue behind the whole fill
    killed = worker.kill_time()
    if survivor is None:
        worker = WorkerProcess(settings, "recover", env={**env, "STALLWATCH_INSTANCE_ID": "bench-0"})
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
    await asyncio.gather(
        *(wait_until_serving(settings, timeout_s, partition=p) for p in range(settings.partitions))
    )


def recovery_timeline(log: str) -> str:
    """The restores the worker logged after the kill."""
    restores = [line.split(" INFO ")[-1] for line in log.splitlines() if "restored" in line]
    return "; ".join(restores[-2:]) or "no restore found in the worker log"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument(
        "--slices", type=int, default=6, help="turns of the latency load each for the echo and the worker"
    )
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds of the load each takes first, not counted"
    )
    parser.add_argument("--log-runs", type=int, default=1000)
    parser.add_argument("--recovery-runs", type=int, default=100_000)
    parser.add_argument("--only", choices=["all", "recovery"], default="all")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--pin", action="store_true", help="services on the last core; the broker and the load on the rest"
    )
    parser.add_argument(
        "--model",
        choices=["partition", "group"],
        default="partition",
        help="the workers' STALLWATCH_TRANSACTION_MODEL, and the echo's",
    )
    args = parser.parse_args()
    kafka("up")
    if args.only == "recovery":
        await report_recovery(args.recovery_runs, args.model)
        return
    log = [orjson.dumps(e) for e in fleet_events(args.log_runs, seed=11, live=200)]
    commands = len(replay_commands(log))
    print(
        f"broker {os.environ.get('STALLWATCH_BOOTSTRAP', '127.0.0.1:9092')}; "
        f"the {args.model} model; {args.partitions} partitions; "
        f"load: {args.runs} runs, {args.rate:g} calls/s for {args.seconds:g} s; "
        f"log: {len(log):,} events of {args.log_runs} runs -> {commands:,} commands"
    )
    print(
        f"{'':<9} {'p50 ms':>7} {'p99 ms':>7} {'verdicts':>9} {'events/s':>9}   "
        "CPU us/event service / broker / client: at the latency load | at full throughput"
    )
    env = {"STALLWATCH_TRANSACTION_MODEL": args.model}
    results = await echo_and_worker(args, log, commands, env)
    results["2 workers"] = await two_workers(args, log, commands, env)
    if args.pin:  # the recovery's workers start on every core, as without --pin
        pin_load(EVERY_CORE)
    (e50, e99, _, e_eps), (w50, w99, _, w_eps) = results["echo"], results["worker"]
    print(
        f"worker/echo: p50 latency {w50 / e50:.2f}x, p99 latency {w99 / e99:.2f}x (target <= 1.5), "
        f"throughput {w_eps / e_eps:.2f}x (target >= 0.5); two workers / one: "
        f"{results['2 workers'][3] / w_eps:.2f}x throughput on this machine's cores"
    )
    if args.recovery_runs:
        await report_recovery(args.recovery_runs, args.model)


Cpu = dict[str, float | None]


async def echo_and_worker(
    args: argparse.Namespace, log: list[bytes], commands: int, env: dict[str, str]
) -> dict[str, tuple[float, float, int, float]]:
    """The echo and one worker serving at once, the latency load turning between them; then each
    one's throughput."""
    results = {}
    served: dict[str, tuple[Settings, list]] = {}
    try:
        for name in ("echo", "worker"):
            settings = fresh_settings(partitions=args.partitions)
            await ensure_topics(settings)
            service = Echo(settings, args.model) if name == "echo" else WorkerProcess(settings, "bench", env)
            served[name] = (settings, [service])
            await wait_until_serving(settings)
            if args.pin:
                pin_services([service.proc.pid])
        took: dict[str, list[float]] = {name: [] for name in served}
        turn_p99: dict[str, list[float]] = {name: [] for name in served}
        cpu_turns: dict[str, list[Cpu]] = {name: [] for name in served}
        # A first turn each, not counted: the first seconds under load (new connections, the
        # broker's compiler) were some runs' slowest turn by far (the echo's p99 14.9 and 27.4 ms
        # against 4.6-6.5 after), and the echo's turn comes first.
        if args.warmup > 0:
            for settings, services in served.values():
                await latency(settings, args.runs, args.rate, args.warmup, pids_of(services))
        for _ in range(args.slices):
            for name, (settings, services) in served.items():
                turn, cpu = await latency(
                    settings, args.runs, args.rate, args.seconds / args.slices, pids_of(services)
                )
                took[name] += turn
                turn_p99[name].append(quantile(turn, 0.99) * 1e3)
                cpu_turns[name].append(cpu)
        inside = internals(served["worker"][1][0].metrics_port)
        for name, (settings, services) in served.items():
            replies = len(log) if name == "echo" else commands
            rate, cpu_full = await throughput(settings, log, replies, pids_of(services))
            results[name] = row(name, took[name], rate, mean_cpu(cpu_turns[name]), cpu_full)
            if name == "worker":
                print(inside, flush=True)
    finally:
        for _, services in served.values():
            for service in services:
                service.stop()
    turns = "; ".join(f"{name} {'/'.join(f'{p:.1f}' for p in turn_p99[name])}" for name in served)
    print(f"  p99 ms by turn: {turns}", flush=True)
    # Beside the pooled p99: one turn the broker stalled (its collector, a fresh broker's first
    # transactions) sets the pooled figure of either service, whichever turn it fell in.
    if all(turn_p99[name] for name in ("echo", "worker")):
        echo_turn, worker_turn = (statistics.median(turn_p99[name]) for name in ("echo", "worker"))
        print(
            f"  median of the turns' p99: echo {echo_turn:.1f} ms, worker {worker_turn:.1f} ms "
            f"({worker_turn / echo_turn:.2f}x)",
            flush=True,
        )
    return results


async def two_workers(
    args: argparse.Namespace, log: list[bytes], commands: int, env: dict[str, str]
) -> tuple[float, float, int, float]:
    settings = fresh_settings(partitions=args.partitions)
    await ensure_topics(settings)
    services = [WorkerProcess(settings, "bench", env)]
    try:
        await wait_until_serving(settings)
        services.append(WorkerProcess(settings, "bench2", env))
        await services[-1].ready()
        if args.pin:
            pin_services([service.proc.pid for service in services])
        await asyncio.sleep(2)  # the group has settled on two members
        took, cpu_steady = await latency(settings, args.runs, args.rate, args.seconds, pids_of(services))
        rate, cpu_full = await throughput(settings, log, commands, pids_of(services))
    finally:
        for service in services:
            service.stop()
    return row("2 workers", took, rate, cpu_steady, cpu_full)


EVERY_CORE = os.sched_getaffinity(0)  # as this process started, before any pinning


def cores() -> tuple[set[int], set[int]]:
    """The services' core (the last) and the others'."""
    every = sorted(EVERY_CORE)
    if len(every) < 2:
        raise SystemExit("--pin needs two cores")
    return {every[-1]}, set(every[:-1])


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` on `cpus` (threads it starts later inherit their starter's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


def pin_services(pids: list[int]) -> None:
    services, others = cores()
    for pid in pids:
        pin(pid, services)
    pin_load(others)


def pin_load(cpus: set[int]) -> None:
    """The broker and this process (the load and its reader) on `cpus`."""
    broker = broker_pid()
    if broker is not None:
        pin(broker, cpus)
    pin(os.getpid(), cpus)


def pids_of(services: list) -> dict[str, list[int | None]]:
    return {"service": [s.proc.pid for s in services], "broker": [broker_pid()], "client": [os.getpid()]}


def mean_cpu(turns: list[Cpu]) -> Cpu:
    """Each process's CPU per event over turns of equal length."""
    out: Cpu = {}
    for name in turns[0]:
        values = [turn[name] for turn in turns]
        out[name] = None if any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]
    return out


def row(
    name: str, took: list[float], rate: float, cpu_steady: Cpu, cpu_full: Cpu
) -> tuple[float, float, int, float]:
    """The service's line printed, and its p50 and p99 (ms), verdicts and events/s returned."""
    p50, p99 = quantile(took, 0.5) * 1e3, quantile(took, 0.99) * 1e3
    cpu = f"{micros(cpu_steady)} | {micros(cpu_full)}"
    print(f"{name:<9} {p50:7.1f} {p99:7.1f} {len(took):9,} {rate:9,.0f}   {cpu}", flush=True)
    return p50, p99, len(took), rate


async def report_recovery(runs: int, model: str) -> None:
    for standby, how in (
        (False, "restarted under the same instance id"),
        (True, "taken over by a second worker"),
    ):
        elapsed, restored = await recovery(runs, standby, model)
        # A takeover cannot begin before the group expires the killed member's session (the
        # model's, from its last heartbeat): most of the figure is that wait.
        session_s = (GROUP_SESSION_TIMEOUT_MS if model == "group" else SESSION_TIMEOUT_MS) / 1000
        bound = f"; the group's {session_s:.0f} s session timeout first" if standby else ""
        print(
            f"recovery: {runs:,} live runs; SIGKILL, {how}: its runs answered again after "
            f"{elapsed:.1f} s (target < 5 s{bound})\n  {restored}"
        )


if __name__ == "__main__":
    configure_logging("WARNING")  # the figures on stdout; only what goes wrong on stderr
    asyncio.run(main())
