"""One tenant's worst events against another tenant's verdicts, on one worker and a real broker.

Tenant A's runtime proposes a call every 50 ms through the Kafka client; tenant B floods its own
events topic with events near the broker's size limit (results of about 1 MB: one long string,
deep objects, long lists, declared volatile fields and facts to work on). Printed side by side:
A's verdict latency alone and during B's flood, the worker's longest silence on /health/live,
its rebalances, and how B's events ended. `tests/streams/worker/test_tenant_isolation.py` runs
the same scenario and asserts what must hold whatever the machine's load.

    python benchmarks/tenant_isolation.py             # the local broker up (make kafka-up)
    python benchmarks/tenant_isolation.py --secure    # SASL, the shipped ACLs and quotas
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.client import KafkaClient
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests.kafka_harness import (
    PROBE_PREFIX,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    replay_commands,
    run_cli,
    wait_until_serving,
)
from tests.script import RunScript
from tests.security.conftest import SecureBroker, new_prefix, running_secure_broker
from tests.security.test_acls import add_tenants

ROOT = Path(__file__).resolve().parents[1]
# Each of B's events stays under the producer's and the broker's 1 MB request limit.
EVENT_BYTES = 900_000
CALL_EVERY_S = 0.05


def flood(runs: int) -> list[bytes]:
    """B's worst events: each run declares what to work on, then reports results of ~1 MB."""
    lines: list[bytes] = []
    tools = [
        {
            "name": "search",
            "volatile_fields": [f"items.*.meta.v{n}" for n in range(64)],
            "facts": {"path": "items", "key": "doc.id"},
        }
    ]
    results = [
        {"text": "x" * EVENT_BYTES},
        {"items": [{"doc": {"id": n}, "meta": {"v1": n}} for n in range(EVENT_BYTES // 44)]},
        _deep(EVENT_BYTES),
    ]
    for n in range(runs):
        script = RunScript(f"flood-{n}", tools=tools)
        for result in results:
            script.round_of(("search", {"q": n}, result))
        lines += script.lines()
    return lines


def _deep(size: int) -> dict:
    """An object of many nested keys, about `size` bytes as JSON."""
    return {f"k{i}": {f"m{j}": {"v": j} for j in range(40)} for i in range(size // 640)}


@dataclass
class Figures:
    alone_ms: list[float] = field(default_factory=list)
    flooded_ms: list[float] = field(default_factory=list)
    timed_out: int = 0
    probes: int = 0
    probes_failed: int = 0
    longest_probe_s: float = 0.0
    rebalances_during: int = 0
    b_expected: dict[str, list[bytes]] = field(default_factory=dict)
    b_got: dict[str, list[bytes]] = field(default_factory=dict)
    worker_alive: bool = True
    log_tail: str = ""
    views_held: int = 0  # times B's waiting records passed its view's bound (the group model)
    # A's calls of the flood phase answered before B's producer had sent its last event.
    flooded_while_sending: int = 0


async def produce_elsewhere(settings: Settings, lines: list[bytes], env: dict[str, str]) -> None:
    """B's runtime is another process: its producer's work must not delay A's client here. `env`:
    its credentials on a secured broker."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as log:
        log.write(b"\n".join(lines))
        log.flush()
        code = (
            "import asyncio, sys; from pathlib import Path; from tests.kafka_harness import produce; "
            "from stallwatch.settings import Settings; "
            "asyncio.run(produce(Settings.from_env(), Path(sys.argv[1]).read_bytes().split(b'\\n')))"
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            log.name,
            cwd=str(ROOT),
            env={
                **os.environ,
                "STALLWATCH_BOOTSTRAP": settings.bootstrap,
                "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
                "STALLWATCH_TENANT": str(settings.tenant),
                **env,
            },
        )
        assert await process.wait() == 0


@dataclass
class Deployment:
    """Where the scenario runs: the plain broker with no access control, or the secured one with
    the shipped ACLs and quotas (`acls.sh`), each part under its own principal."""

    worker: Settings
    a: Settings
    b: Settings
    worker_env: dict[str, str] = field(default_factory=dict)
    b_env: dict[str, str] = field(default_factory=dict)
    secure: SecureBroker | None = None

    @classmethod
    def plain(cls) -> Deployment:
        settings = fresh_settings(2)
        return cls(settings, settings.for_tenant("a"), settings.for_tenant("b"))

    @classmethod
    def secured(cls, broker: SecureBroker) -> Deployment:
        prefix = new_prefix()
        return cls(
            broker.settings("admin", prefix),
            broker.settings("tenant-a", prefix, tenant="a"),
            broker.settings("tenant-b", prefix, tenant="b"),
            broker.env("stallwatch-worker"),
            broker.env("tenant-b"),
            broker,
        )

    async def before_the_worker(self) -> None:
        """On the secured broker, the administrator makes the topics and grants the ACLs and
        the tenants' quotas before the worker starts."""
        broker = self.secure
        if broker is None:
            return
        prefix = self.worker.topic_prefix
        await ensure_topics(self.worker)
        add_tenants(broker, prefix, "a", "b")
        broker.acls(prefix, "worker", "User:stallwatch-worker")
        broker.acls(prefix, "tenant", "a", "User:tenant-a")
        broker.acls(prefix, "tenant", "b", "User:tenant-b")

    async def with_the_worker(self) -> None:
        """On the plain broker, the tenants are added while the worker runs."""
        if self.secure is not None:
            return
        await wait_until_serving(self.worker)
        added = run_cli(self.worker, "tenants", "add", "a", "b")
        assert added.returncode == 0, added.stderr


def live_status(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/live", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


# Calls of each phase's new client and run not counted: the first ones wait for the client's
# metadata of the tenant's topics, in either phase.
WARMUP_CALLS = 5


async def tenant_calls(
    settings: Settings,
    calls: int,
    into: list[float],
    figures: Figures,
    during: asyncio.Task[None] | None = None,
) -> None:
    """A's calls, their latencies into `into`; with `during` (B's flood), the calls answered
    before it ended counted."""
    async with KafkaClient(settings, verdict_timeout_s=5.0) as client:
        run = await client.start_run(f"steady-{time.monotonic_ns()}", "researcher")
        for n in range(WARMUP_CALLS + calls):
            await run.start_round()
            began = time.perf_counter()
            call_id, decision = await run.propose("search", {"q": n})
            if n >= WARMUP_CALLS:
                into.append((time.perf_counter() - began) * 1000)
                figures.flooded_while_sending += during is not None and not during.done()
            figures.timed_out += decision.timed_out
            await run.result(call_id, "search", "ok", {"n": n})
            await run.end_round()
            await asyncio.sleep(CALL_EVERY_S)  # the runtime's own pace between calls
        await run.end()


async def probe_health(worker: WorkerProcess, figures: Figures, stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        status = await asyncio.to_thread(live_status, worker.web_port)
        figures.longest_probe_s = max(figures.longest_probe_s, time.perf_counter() - began)
        figures.probes += 1
        figures.probes_failed += status != 200
        await asyncio.sleep(0.25)  # a probe's period, as a kubelet's


async def scenario(
    deployment: Deployment, flood_runs: int = 20, calls: int = 60, env: dict[str, str] | None = None
) -> Figures:
    a, b = deployment.a, deployment.b
    figures = Figures()
    await deployment.before_the_worker()
    worker = WorkerProcess(
        deployment.worker,
        env={"STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5", **deployment.worker_env, **(env or {})},
    )
    try:
        await deployment.with_the_worker()
        for tenant in (a, b):
            await wait_until_serving(tenant)
        await tenant_calls(a, calls, figures.alone_ms, figures)
        log = flood(flood_runs)
        figures.b_expected = by_run(replay_commands(log, tenant="b"))
        rebalances_before = worker.log_path.read_text().count("rebalance: revoking")
        stop = asyncio.Event()
        probing = asyncio.create_task(probe_health(worker, figures, stop))
        flooding = asyncio.create_task(produce_elsewhere(b, log, deployment.b_env))
        await tenant_calls(a, calls, figures.flooded_ms, figures, during=flooding)
        await flooding
        got = await collect(b, b.commands_topic, sum(map(len, figures.b_expected.values())), 180)
        figures.b_got = {run: c for run, c in by_run(got).items() if not run.startswith(PROBE_PREFIX)}
        stop.set()
        await probing
        figures.rebalances_during = (
            worker.log_path.read_text().count("rebalance: revoking") - rebalances_before
        )
        figures.worker_alive = worker.alive()
        figures.log_tail = worker.log_tail()
        figures.views_held = worker.log_path.read_text().count("bytes wait for its pipeline")
    finally:
        worker.stop()
    return figures


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


# Every batch applied on the event loop, beside the worker as it runs by default; the default
# second, so that its baseline is not the one measured while a broker just started warms up.
SHIPPED = "large events on the apply thread"
WAYS = {
    "every batch on the event loop": {"STALLWATCH_OFF_LOOP_EVENT_BYTES": "0"},
    SHIPPED: {},
}
# B's quota (acls.sh) and what one of its runs sends: the flood outlasts A's calls by half again.
B_QUOTA_BYTES_S = 1_048_576
RUN_BYTES = 2_550_000
CALL_S = CALL_EVERY_S + 0.015  # a call's pace and its round trips


def flood_runs_for(calls: int) -> int:
    return max(4, math.ceil(1.5 * calls * CALL_S * B_QUOTA_BYTES_S / RUN_BYTES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--secure",
        action="store_true",
        help="on the secured broker (SASL, the shipped ACLs and tenants' quotas), started if it is not up",
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=1000,
        help="A's calls in each phase: the p99 is their 10th slowest at 1,000 (a call every 50 ms)",
    )
    parser.add_argument(
        "--flood-runs",
        type=int,
        default=0,
        help="B's runs, 13 events of up to 900 KB each (default: enough to outlast A's calls at B's quota)",
    )
    parser.add_argument(
        "--ways", choices=["both", "shipped"], default="both", help="the loop's way beside, or not"
    )
    args = parser.parse_args()
    runs = args.flood_runs or flood_runs_for(args.calls)
    b_events = flood(runs)
    print(
        f"tenant B's flood: {sum(map(len, b_events)) / 1e6:.0f} MB in {len(b_events)} events "
        f"of up to {EVENT_BYTES:,} bytes; {'SASL, ACLs and quotas' if args.secure else 'no access control'}"
    )
    print(f"{'tenant A':<52} {'p50':>9} {'p99':>9} {'max':>9}")
    with running_secure_broker() if args.secure else contextlib.nullcontext() as broker:
        ways = WAYS if args.ways == "both" else {SHIPPED: WAYS[SHIPPED]}
        for way, env in ways.items():
            deployment = Deployment.secured(broker) if broker is not None else Deployment.plain()
            figures = asyncio.run(scenario(deployment, flood_runs=runs, calls=args.calls, env=env))
            for name, values in (("alone", figures.alone_ms), ("during B's flood", figures.flooded_ms)):
                p50, p99 = percentile(values, 50), percentile(values, 99)
                print(f"  {way + ', ' + name:<50} {p50:6.1f} ms {p99:6.1f} ms {max(values):6.1f} ms")
            same = figures.b_got == figures.b_expected
            print(
                f"    A's calls without a verdict in 5 s: {figures.timed_out}; /health/live "
                f"{figures.probes - figures.probes_failed} of {figures.probes} answered 200, the slowest "
                f"in {figures.longest_probe_s * 1000:.0f} ms; rebalances {figures.rebalances_during}; "
                f"worker alive {figures.worker_alive}; B's {len(figures.b_expected)} runs as replay: {same}; "
                f"B's view held {figures.views_held} times; A's calls answered while B still sent: "
                f"{figures.flooded_while_sending} of {len(figures.flooded_ms)}"
            )
            ratio = percentile(figures.flooded_ms, 99) / percentile(figures.alone_ms, 99)
            print(f"    A's p99 during the flood / alone: {ratio:.2f}x (the target is 2x at most)")


if __name__ == "__main__":
    main()
