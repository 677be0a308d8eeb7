"""A decision worker across many tenants, under each transaction model (docs/tenants.md): the
partition model (a consumer group per tenant, a transactional producer per input partition) is
the baseline the group model (tenant groups on librdkafka, one transaction per group) is
measured against, side by side in one run.

For each tenant count: the tenants' topics made (`stallwatch tenants add`), one worker started and
timed until it serves them all (`/health/ready`), its idle CPU and open sockets, then light
traffic spread over every tenant (a call every so often per tenant, each through its own topic):
the worker's CPU per call and the verdict latency; then a second worker joins under the same
traffic: its time to ready and the longest any call waited for its verdict meanwhile (a
tenant's verdicts stopped at least that long; the gap between two verdicts of one tenant would
count the calls' own spacing too, 10 s per tenant at 1,000 tenants and 100 calls a second), with
the tenant, when, and the calls never answered. Before the group model's rows, its bare echo
(benchmarks/model_echo.py) over the same tenants' topics and tenant groups under the same traffic:
the floor of its CPU per call and latency (`--no-echo` skips it).

`--profile DIR` samples the first worker with py-spy (in the venv) while the traffic runs, and
while the second worker joins, into DIR/{model}-{tenants}-{busy,join}.txt (collapsed stacks).

    python benchmarks/tenants_bench.py --tenants 1 10 100 --partitions 2 --rate 100 --seconds 20 \
        --models partition group
    python benchmarks/tenants_bench.py --shapes 1x2 10x2 100x2 300x2 1000x1 --models group

`make bench-tenants` runs the second on a broker of its own, sized for a thousand tenants (see the
Makefile).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kafka_bench import cpu_seconds, open_sockets
from stallwatch.contract.envelope import envelope
from stallwatch.settings import Settings
from tests.kafka_harness import WorkerProcess, fresh_settings, run_cli

READY_TIMEOUT_S = 600.0
# A call whose verdict waits longer than this while a worker joins counts as stopped (the target).
LATE_S = 5.0


async def until_ready(worker: WorkerProcess) -> float:
    began = time.monotonic()
    while await asyncio.to_thread(worker.health) != 200:
        if not worker.alive() or time.monotonic() - began > READY_TIMEOUT_S:
            raise RuntimeError(f"worker not ready:\n{worker.log_tail()}")
        await asyncio.sleep(0.2)
    return time.monotonic() - began


class Traffic:
    """Calls spread round robin over the tenants, one run per tenant; each call's verdict timed
    from its send to its arrival."""

    def __init__(self, tenants: list[Settings], rate: float) -> None:
        self.tenants, self.rate = tenants, rate
        self.sent: dict[str, tuple[float, str]] = {}  # by call id: when, to which tenant
        self.latencies_ms: list[float] = []
        # The longest wait for a verdict since `watch` (seconds, tenant, sent at), None before it.
        self.since: float | None = None
        self.longest: tuple[float, str, float] = (0.0, "", 0.0)
        self.late: list[tuple[float, str, float]] = []  # since `watch`: waits past LATE_S
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
                self.sent[call_id] = (time.monotonic(), tenant.tenant or "")
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
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    now = time.monotonic()
                    for record in records:
                        sent = self.sent.pop(orjson.loads(record.value).get("call_id", ""), None)
                        if sent is not None:
                            self._answered(sent, now)
        finally:
            await consumer.stop()

    def _answered(self, sent: tuple[float, str], now: float) -> None:
        at, tenant = sent
        if self.since is None:
            self.latencies_ms.append((now - at) * 1000)
        elif at >= self.since:
            self._waited(now - at, tenant, at - self.since)

    def _waited(self, wait: float, tenant: str, sent: float) -> None:
        self.longest = max(self.longest, (wait, tenant, sent))
        if wait > LATE_S:
            self.late.append((wait, tenant, sent))

    def watch(self) -> None:
        """From now on, the longest wait for a verdict is kept instead of the latencies."""
        self.since = time.monotonic()

    def unanswered(self) -> int:
        """Calls sent since `watch` that never got a verdict (each counts as a wait until now)."""
        now, since = time.monotonic(), self.since or 0.0
        unanswered = [(at, tenant) for at, tenant in self.sent.values() if at >= since]
        for at, tenant in unanswered:
            self._waited(now - at, tenant, at - since)
        return len(unanswered)

    def lateness(self) -> str:
        """The calls that waited past LATE_S: how many, of how many tenants, sent when."""
        if not self.late:
            return f"no call waited over {LATE_S:g} s"
        sent = sorted(at for _, _, at in self.late)
        tenants = sorted({tenant for _, tenant, _ in self.late}, key=lambda t: int(t[1:] or 0))
        shown = " ".join(tenants[:12]) + (" ..." if len(tenants) > 12 else "")
        # Under the group model, by tenant group: a stop of one group's consumer shows as one.
        groups = Counter(tenant_group(tenant, self.tenants[0].tenant_groups) for tenant in tenants)
        return (
            f"{len(self.late)} calls waited over {LATE_S:g} s, of {len(tenants)} tenants ({shown}; "
            f"by tenant group {dict(sorted(groups.items()))}), "
            f"sent {sent[0]:.1f}-{sent[-1]:.1f} s after the join began"
        )

    def stop(self) -> None:
        self._stop.set()


async def drop_topics(settings: Settings) -> None:
    """Every topic of the run's prefix deleted: a broker kept for the next run carries none of
    this one's thousands of partitions (their files and memory), which would weigh on it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        ours = [t for t in await admin.list_topics() if t.startswith(f"{settings.topic_prefix}.")]
        for first in range(0, len(ours), 200):
            await admin.delete_topics(ours[first : first + 200])
    finally:
        await admin.close()


def tenant_group(tenant: str, groups: int) -> int:
    """The tenant group a tenant is hashed into (`TenantGroups.of`)."""
    return int.from_bytes(hashlib.sha256(tenant.encode()).digest()[:4], "big") % groups


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values or [0.0])[0]


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each kind of thread of a process, by its name (librdkafka's C threads
    are `rdk:main`, `rdk:broker…`; Python's take their names' first 15 characters)."""
    by_name: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while listed
            continue
        kind = name.rstrip("0123456789-") or name
        seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        by_name[kind] = by_name.get(kind, 0.0) + seconds
    return by_name


def cpu_by_thread(before: dict[str, float], after: dict[str, float], calls: int) -> str:
    """µs per call of each kind of thread between two `thread_cpu` readings, the largest first."""
    spent = {name: (after[name] - before.get(name, 0.0)) / max(1, calls) * 1e6 for name in after}
    largest = sorted(spent.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {us:.0f}" for name, us in largest if us >= 1)


def profiler(pid: int, seconds: float, out: Path | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling `pid` for `seconds` into `out` (collapsed stacks, threads apart), or None."""
    if out is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).parent / "py-spy"
    command = [str(py_spy), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200"]
    return subprocess.Popen(
        [*command, "--format", "raw", "--threads", "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def made_tenants(tenants: int, partitions: int) -> tuple[Settings, list[Settings]]:
    """A fresh prefix with `tenants` tenants' topics made: its settings, and each tenant's."""
    settings = fresh_settings(partitions)
    names = [f"t{n}" for n in range(tenants)]
    for first in range(0, tenants, 50):
        made = await asyncio.to_thread(run_cli, settings, "tenants", "add", *names[first : first + 50])
        assert made.returncode == 0, made.stderr
    return settings, [settings.for_tenant(name) for name in names]


class TenantsEcho:
    """The floor: the group model's bare transactional echo (benchmarks/model_echo.py) over every
    tenant's topics, in as many tenant groups as the worker keeps."""

    def __init__(self, settings: Settings, each: list[Settings]) -> None:
        def topics(of: str) -> str:
            return ",".join(getattr(tenant, of) for tenant in each)

        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("model_echo.py")),
                "group",
                settings.bootstrap,
                topics("events_topic"),
                topics("commands_topic"),
                topics("changelog_topic"),
                f"echo-{settings.topic_prefix}",
                str(settings.tenant_groups),
            ]
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def measure_echo(tenants: int, partitions: int, rate: float, seconds: float) -> dict[str, float | str]:
    """The echo under the worker's traffic: served once one call per tenant is answered, then its
    idle CPU, sockets, CPU per call and latencies as the worker's are measured."""
    settings, each = await made_tenants(tenants, partitions)
    traffic = Traffic(each, rate)
    reading = asyncio.create_task(traffic.read())
    await asyncio.sleep(1)  # the reader placed at the end of every commands topic
    echo = TenantsEcho(settings, each)
    try:
        began = time.monotonic()
        await traffic.run(len(each) / rate)
        while traffic.sent:
            if echo.proc.poll() is not None or time.monotonic() - began > READY_TIMEOUT_S:
                raise RuntimeError(
                    f"the echo answered {traffic.calls - len(traffic.sent)} of {traffic.calls}"
                )
            await asyncio.sleep(0.2)
        ready_s = time.monotonic() - began
        idle_before = cpu_seconds(echo.proc.pid)
        await asyncio.sleep(10)  # idle: nothing sent
        idle = (cpu_seconds(echo.proc.pid) - idle_before) / 10
        sockets = open_sockets(echo.proc.pid)
        traffic.latencies_ms.clear()
        calls_before, busy_before = traffic.calls, cpu_seconds(echo.proc.pid)
        threads_before = thread_cpu(echo.proc.pid)
        await traffic.run(seconds)
        await asyncio.sleep(2)  # the last answers in
        calls = traffic.calls - calls_before
        per_call_us = (cpu_seconds(echo.proc.pid) - busy_before) / max(1, calls) * 1e6
        by_thread = cpu_by_thread(threads_before, thread_cpu(echo.proc.pid), calls)
        traffic.stop()
        await reading
    finally:
        echo.stop()
        await drop_topics(settings)
    return served(ready_s, idle, sockets, per_call_us, list(traffic.latencies_ms), by_thread)


def served(
    ready_s: float, idle: float, sockets: int, per_call_us: float, latencies: list[float], by_thread: str
) -> dict[str, float | str]:
    """The figures a served process is measured by, the worker's and its echo's alike."""
    return {
        "ready_s": ready_s,
        "idle_cpu": idle * 100,
        "sockets": sockets,
        "per_call_us": per_call_us,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "by_thread": by_thread,
    }


async def measure(
    tenants: int, partitions: int, rate: float, seconds: float, model: str, profile: Path | None = None
) -> dict[str, float | str]:
    settings, each = await made_tenants(tenants, partitions)
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
        name = f"{model}-{tenants}"
        sampling = profiler(first_worker.proc.pid, seconds, profile and profile / f"{name}-busy.txt")
        busy_before, threads_before = cpu_seconds(first_worker.proc.pid), thread_cpu(first_worker.proc.pid)
        await traffic.run(seconds)
        await asyncio.sleep(2)  # the last verdicts in
        per_call_us = (cpu_seconds(first_worker.proc.pid) - busy_before) / max(1, traffic.calls) * 1e6
        by_thread = cpu_by_thread(threads_before, thread_cpu(first_worker.proc.pid), traffic.calls)
        if sampling is not None:
            await asyncio.to_thread(sampling.wait)
        latencies = list(traffic.latencies_ms)
        traffic.watch()  # waits within the join's traffic only
        joining = asyncio.create_task(traffic.run(seconds * 3))
        sampling = profiler(first_worker.proc.pid, seconds * 2, profile and profile / f"{name}-join.txt")
        second = WorkerProcess(settings, "second", env)
        join_s = await until_ready(second)
        await joining
        await asyncio.sleep(2)  # the last verdicts in
        traffic.stop()
        await reading
        unanswered = traffic.unanswered()
        if sampling is not None:
            await asyncio.to_thread(sampling.wait)
    finally:
        first_worker.stop()
        if second is not None:
            second.stop()
        await drop_topics(settings)
    return {
        **served(ready_s, idle, sockets, per_call_us, latencies, by_thread),
        "join_s": join_s,
        "wait_s": traffic.longest[0],
        "wait_tenant": traffic.longest[1],
        "wait_at_s": traffic.longest[2],
        "unanswered": unanswered,
        "late": traffic.lateness(),
        "logs": f"{first_worker.log_path} {second.log_path if second else ''}",
    }


def shape(text: str) -> tuple[int, int]:
    """`300x2`: 300 tenants of 2 partitions each."""
    tenants, _, partitions = text.partition("x")
    try:
        return int(tenants), int(partitions)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not TENANTSxPARTITIONS, as 300x2") from None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--shapes",
        type=shape,
        nargs="+",
        help="tenants x partitions each, as 300x2 1000x1 (in place of --tenants and --partitions)",
    )
    parser.add_argument("--rate", type=float, default=100.0, help="calls a second over all tenants")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--models", nargs="+", default=["partition", "group"], choices=["partition", "group"])
    parser.add_argument("--profile", type=Path, help="a folder for py-spy's samples of the first worker")
    parser.add_argument("--no-echo", action="store_true", help="skip the group model's bare echo")
    args = parser.parse_args()
    if args.profile and not (Path(sys.executable).parent / "py-spy").exists():
        parser.error(f"--profile needs py-spy in the venv: `{sys.executable} -m pip install py-spy`")
    shapes = args.shapes or [(tenants, args.partitions) for tenants in args.tenants]
    print(f"{args.rate:g} calls/s spread over every tenant")
    print(
        "model      tenants × partitions  served in  idle CPU  sockets  CPU/call  verdict p50 / p99   "
        "second ready  longest wait while it joins"
    )
    for tenants, partitions in shapes:
        what = f"{tenants:>7} × {partitions:<10}"
        if "group" in args.models and not args.no_echo:
            r = asyncio.run(measure_echo(tenants, partitions, args.rate, args.seconds))
            print(
                f"{'echo':<9}  {what}  {r['ready_s']:7.1f} s  {r['idle_cpu']:6.1f} %  "
                f"{r['sockets']:7.0f}  {r['per_call_us']:6.0f} µs  {r['p50']:6.1f} / {r['p99']:6.1f} ms",
                flush=True,
            )
            print(f"           µs a call by thread: {r['by_thread']}", flush=True)
        for model in args.models:
            r = asyncio.run(measure(tenants, partitions, args.rate, args.seconds, model, args.profile))
            print(
                f"{model:<9}  {what}  {r['ready_s']:7.1f} s  {r['idle_cpu']:6.1f} %  "
                f"{r['sockets']:7.0f}  "
                f"{r['per_call_us']:6.0f} µs  {r['p50']:6.1f} / {r['p99']:6.1f} ms  {r['join_s']:9.1f} s  "
                f"{r['wait_s']:6.1f} s ({r['wait_tenant']}, sent {r['wait_at_s']:.1f} s after the join "
                f"began; {r['unanswered']} unanswered)",
                flush=True,
            )
            print(f"           µs a call by thread: {r['by_thread']}", flush=True)
            print(f"           {r['late']}; logs: {r['logs']}", flush=True)


if __name__ == "__main__":
    main()
