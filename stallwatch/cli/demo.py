"""`stallwatch demo` (the main job behind `make run`): a simulated fleet through Kafka and a worker.

Starts a worker process and the fleet app, drives a small fleet through them with the Kafka
client, prints every decision as it arrives, plays the fleet scene (a tool breaks for every run
at once: stallwatch.cli.demo_fleet) and a summary per run, then stops both and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from stallwatch.cli import demo_fleet
from stallwatch.client import KafkaClient, Run
from stallwatch.kafka.topics import ensure_topics
from stallwatch.logs import configure as configure_logging
from stallwatch.settings import Settings

TOOLS: list[dict[str, Any]] = [
    {"name": "search"},
    {"name": "fetch_page"},
    {"name": "get_price"},
    {"name": "wait_for_researchers", "repeat_exempt": True},
]
SAME_DOCS = {
    "documents": [
        {"id": "kafka-log", "title": "The log: what every engineer should know"},
        {"id": "faust-intro", "title": "Stream processing with Faust"},
    ]
}


@dataclass
class Outcome:
    run: Run
    kind: str
    decisions: Counter = field(default_factory=Counter)


def say(run: Run, text: str) -> None:
    print(f"  {run.run_id:<22} round {run.round:>2}  {text}", flush=True)


async def call(out: Outcome, tool: str, args: dict, result: object) -> bool:
    call_id, decision = await out.run.propose(tool, args)
    out.decisions["allow" if decision.allowed else decision.code] += 1
    if decision.allowed:
        await out.run.result(call_id, tool, "ok", result)
        say(
            out.run,
            f"allow  {tool}({args})" + ("  [no verdict in time: failed open]" if decision.timed_out else ""),
        )
    else:
        say(out.run, f"REFUSE {tool}({args}) [{decision.code}] {decision.reason[:90]}...")
    return decision.allowed


async def rounds(out: Outcome, count: int, body) -> None:
    seen_nudges = 0
    for i in range(count):
        if out.run.stop is not None:
            break
        await out.run.start_round()
        await body(i)
        await out.run.end_round()
        await asyncio.sleep(0.05)  # the model "thinks"; the stop has time to arrive
        for nudge in out.run.nudges[seen_nudges:]:
            say(out.run, f"NUDGE  {nudge.reason}")
        seen_nudges = len(out.run.nudges)
    if out.run.stop is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(out.run.stopped.wait(), 1.0)
    if out.run.stop is not None:
        say(out.run, f"STOP   [{out.run.stop.code}] {out.run.stop.reason[:100]}...")
    await out.run.end("answered")


async def looping_researcher(client: KafkaClient, tag: str) -> Outcome:
    out = Outcome(await client.start_run(f"looper-{tag}", "researcher", TOOLS), "rewords one search")
    await rounds(out, 21, lambda i: call(out, "search", {"q": f"kafka storage, wording {i}"}, SAME_DOCS))
    return out


async def paging_researcher(client: KafkaClient, tag: str) -> Outcome:
    out = Outcome(await client.start_run(f"pager-{tag}", "researcher", TOOLS), "pages through results")
    await rounds(
        out,
        8,
        lambda i: call(out, "search", {"q": "kafka storage", "page": i}, {"documents": [{"id": f"doc-{i}"}]}),
    )
    return out


async def insisting_chat(client: KafkaClient, tag: str) -> Outcome:
    out = Outcome(await client.start_run(f"chat-{tag}", "chat", TOOLS), "asks the same price again")

    async def body(i: int) -> None:
        for _ in range(4):
            await call(out, "get_price", {"symbol": "ACME"}, {"price": 12.5})

    await rounds(out, 2, body)
    return out


async def waiting_lead(client: KafkaClient, tag: str) -> Outcome:
    out = Outcome(await client.start_run(f"lead-{tag}", "researcher", TOOLS), "waits on researchers")

    async def body(i: int) -> None:
        done = min(i // 2, 3)
        await call(out, "wait_for_researchers", {"ids": ["r1", "r2", "r3"]}, {"done": done, "of": 3})

    await rounds(out, 8, body)
    return out


async def drive(settings: Settings) -> list[Outcome]:
    tag = uuid.uuid4().hex[:6]
    async with KafkaClient(settings, verdict_timeout_s=10.0) as client:
        return list(
            await asyncio.gather(
                looping_researcher(client, tag),
                paging_researcher(client, tag),
                insisting_chat(client, tag),
                waiting_lead(client, tag),
            )
        )


def start_worker(settings: Settings) -> subprocess.Popen:
    """The worker's warnings and errors reach the demo's stderr (its INFO would bury the demo's
    output): a fault is seen, a healthy start-up and shutdown print nothing."""
    # Ports 0: the demo reads neither endpoint, and another worker may hold the default ports.
    env = {
        "STALLWATCH_LOG_LEVEL": "WARNING",
        "STALLWATCH_LOG_FORMAT": "text",
        "STALLWATCH_WEB_PORT": "0",
        "STALLWATCH_METRICS_PORT": "0",
        **os.environ,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_PARTITIONS": str(settings.partitions),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "stallwatch.cli.main", "worker"], env=env, stdout=subprocess.DEVNULL
    )


async def wait_for_worker(settings: Settings, worker: subprocess.Popen, timeout_s: float = 90) -> None:
    """A throwaway run's first call: answered once the worker has joined and recovered."""
    deadline = time.monotonic() + timeout_s
    async with KafkaClient(settings) as client:  # the default timeout: a loaded machine is slow to connect
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise RuntimeError("the worker exited during start-up")
            run = await client.start_run(f"warmup-{uuid.uuid4().hex[:6]}", "chat", TOOLS)
            _, decision = await run.propose("get_price", {"symbol": "WARM"})
            await run.end("warm-up")
            if not decision.timed_out:
                return
            await asyncio.sleep(0.2)  # failing open answers at once: give the reconnection its turn
    raise RuntimeError(f"no worker answered within {timeout_s} s")


def main(settings: Settings) -> int:
    configure_logging("WARNING")  # the demo prints its own story; the log only what goes wrong
    # The demo's worker and fleet app sign and check advisories with one key of their own, as a
    # deployment with tenants does (unset, the worker warns that any advisory counts).
    os.environ.setdefault("STALLWATCH_ADVISORY_KEY", secrets.token_hex(32))
    asyncio.run(ensure_topics(settings))
    print(f"stallwatch demo: broker {settings.bootstrap}, topics {settings.topic_prefix}.*", flush=True)
    worker = start_worker(settings)
    fleet_app = demo_fleet.start_fleet_app(settings)  # starts (Faust is slow to) while the runs go
    crowd: list[demo_fleet.CrowdRun] = []
    try:
        asyncio.run(wait_for_worker(settings, worker))
        print("worker ready; driving the fleet:\n", flush=True)
        outcomes = asyncio.run(drive(settings))
        if asyncio.run(demo_fleet.wait_for_fleet_app(fleet_app)):
            print("\nfleet app ready; the fleet scene:\n", flush=True)
            crowd = asyncio.run(demo_fleet.broken_tool_scene(settings, uuid.uuid4().hex[:6]))
        else:
            print(
                f"\nthe fleet app did not start (its log: {fleet_app.log_path}); no fleet scene", flush=True
            )
    finally:
        fleet_app.stop()
        worker.terminate()
        worker.wait(30)
    # The fleet app's log is a file of its own (Faust's INFO would bury the demo): its errors are
    # said here, so that a fault in it is seen.
    if errors := fleet_app.errors():
        print(
            f"stallwatch demo: the fleet app logged {len(errors)} error line(s), the first: "
            f"{errors[0].strip()} (its log: {fleet_app.log_path})",
            file=sys.stderr,
            flush=True,
        )
    print("\nsummary:")
    for out in outcomes:
        stop = out.run.stop
        ending = (
            f"stopped at round {stop.round}: {stop.code}" if stop else f"ran {out.run.round} rounds, no stop"
        )
        counts = ", ".join(f"{k} {v}" for k, v in sorted(out.decisions.items()))
        print(f"  {out.run.run_id:<22} {out.kind:<28} {ending:<36} calls: {counts}")
    demo_fleet.summary(crowd)
    return 0
