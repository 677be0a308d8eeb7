"""`stallwatch demo`'s fleet scene: a tool breaks for every run at once.

The fleet app (`stallwatch fleet`) runs beside the worker. Six runs on the shared topic (the
deployment's own, which names no tenant) call `search`;
it starts failing for all of them; the fleet app opens a `tool_failing` incident from the
worker's tallies, the runs get the words through the nudge path and turn to another tool long
before their own failure rule (10 in a row here) would stop them; `search` recovers and the
incident closes after a quiet window.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from stallwatch.client import KafkaClient, Run
from stallwatch.kafka.aiokafka_patch import Consumer
from stallwatch.kafka.options import aiokafka_options
from stallwatch.settings import Settings

# Small windows so the incident opens and closes within the scene (the defaults: 5 minutes
# wide, 1 minute step, closed after a quiet window): 10 s wide, 1 s step, closed 3 s of event
# time after its rule last held; event-time ticks often, so a quiet tool closes promptly.
FLEET_DEMO_ENV = {
    "STALLWATCH_FLEET_WINDOW_S": "10",
    "STALLWATCH_FLEET_STEP_S": "1",
    "STALLWATCH_FLEET_QUIET_S": "3",
    "STALLWATCH_FLEET_TICK_INTERVAL_S": "0.2",
}
CROWD = 6  # runs using the tool: over the rule's 5
# Each run's own rule would stop it after this many failures in a row: the fleet tells it sooner.
OWN_FAILURE_LIMIT = 10
# Seconds between a run's rounds: the model "thinks"; a run alone fails about once a second.
ROUND_PAUSE_S = 1.0
# How long the scene waits for the incident to open, then to close, before giving up.
OPEN_TIMEOUT_S = 45.0
CLOSE_TIMEOUT_S = 60.0
# After the incident opened, the tool stays broken this long, then recovers.
RECOVER_AFTER_S = 3.0
TOOLS = [{"name": "search"}, {"name": "fetch_page"}]


@dataclass
class FleetApp:
    """The fleet app as a child process, in a directory of its own (Faust writes one there)."""

    proc: subprocess.Popen
    log_path: Path

    def ready(self) -> bool:
        return "Ready" in self.log_path.read_text(errors="replace")

    def errors(self) -> list[str]:
        """Its log's ERROR and CRITICAL lines (Faust's format: `[time] [pid] [LEVEL] message`)."""
        return [
            line
            for line in self.log_path.read_text(errors="replace").splitlines()
            if "] [ERROR] " in line or "] [CRITICAL] " in line
        ]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_fleet_app(settings: Settings) -> FleetApp:
    workdir = Path(tempfile.mkdtemp(prefix="stallwatch-demo-fleet-"))
    log_path = workdir / "fleet.log"
    env = {
        **os.environ,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_PARTITIONS": str(settings.partitions),
        # Faust creates its own topics (changelog, assignor) with these.
        "STALLWATCH_REPLICATION_FACTOR": str(settings.replication_factor),
        "STALLWATCH_MIN_INSYNC_REPLICAS": str(settings.min_insync_replicas),
        "STALLWATCH_FLEET_WEB_PORT": str(_free_port()),
        **FLEET_DEMO_ENV,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "stallwatch.cli.main", "fleet"],
        env=env,
        cwd=workdir,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return FleetApp(proc, log_path)


async def wait_for_fleet_app(app: FleetApp, timeout_s: float = 90.0) -> bool:
    """True once the app has joined its group; False if it exited or never got there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if app.proc.poll() is not None:
            return False
        if app.ready():
            return True
        await asyncio.sleep(0.3)
    return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Scene:
    tenant: str | None = None  # the shared topic's runs: an event there cannot name a tenant
    broken: bool = True
    done: bool = False
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class CrowdRun:
    run: Run
    calls: dict[str, int] = field(default_factory=dict)  # tool and outcome -> calls
    told: bool = False


def say(run: Run, text: str) -> None:
    print(f"  {run.run_id:<22} round {run.round:>2}  {text}", flush=True)


async def watch_incidents(settings: Settings, scene: Scene, started: asyncio.Event) -> None:
    """Print the scene's incidents as the fleet app writes them (the shared topic's only)."""
    consumer = Consumer(
        settings.incidents_topic,
        auto_offset_reset="latest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        **aiokafka_options(settings),
    )
    await consumer.start()
    try:
        await consumer.getmany(timeout_ms=100)  # assigned and positioned at the end
        started.set()
        while not scene.closed.is_set():
            for records in (await consumer.getmany(timeout_ms=300)).values():
                for record in records:
                    _show(scene, orjson.loads(record.value) if record.value else {})
    finally:
        await consumer.stop()


def _show(scene: Scene, incident: dict[str, Any]) -> None:
    if incident.get("tenant") != scene.tenant or incident.get("tool") != "search":
        return
    evidence = ", ".join(f"{k} {v}" for k, v in (incident.get("evidence") or {}).items())
    if incident.get("state") == "open" and not scene.opened.is_set():
        print(
            f"\n  FLEET  incident OPEN   {incident['kind']} `search` ({evidence}); "
            f"{incident.get('advised_runs', 0)} runs told\n",
            flush=True,
        )
        scene.opened.set()
    elif incident.get("state") == "closed":
        print(
            f"\n  FLEET  incident CLOSED {incident['kind']} `search`: a quiet window without failures\n",
            flush=True,
        )
        scene.closed.set()


async def crowd_member(member: CrowdRun, scene: Scene) -> None:
    run = member.run
    heard = 0
    while not scene.done and run.stop is None:
        await run.start_round()
        tool = "fetch_page" if member.told else "search"
        call_id, decision = await run.propose(tool, {"q": f"question {run.round}"})
        if decision.allowed:
            failed = tool == "search" and scene.broken
            await run.result(
                call_id,
                tool,
                "error" if failed else "ok",
                {"error": "503 Service Unavailable"}
                if failed
                else {"documents": [{"id": f"{run.run_id}-{run.round}"}]},
            )
            outcome = f"{tool} {'failed' if failed else 'ok'}"
            member.calls[outcome] = member.calls.get(outcome, 0) + 1
            if tool == "search":
                say(run, f"{'FAILED' if failed else 'ok    '} search(question {run.round})")
        await run.end_round()
        await asyncio.sleep(ROUND_PAUSE_S)
        for nudge in run.nudges[heard:]:
            if nudge.detail.get("kind") == "tool_failing" and nudge.detail.get("tool") == "search":
                member.told = True
                say(run, f"NUDGE  {nudge.reason}")
                say(run, "       (turns to fetch_page)")
        heard = len(run.nudges)
    if run.stop is not None:
        say(run, f"STOP   [{run.stop.code}]")
    await run.end("answered")


async def broken_tool_scene(settings: Settings, tag: str) -> list[CrowdRun]:
    """The scene; returns the runs with what each did."""
    scene = Scene()
    watching = asyncio.Event()
    watcher = asyncio.create_task(watch_incidents(settings, scene, watching))
    await asyncio.wait_for(watching.wait(), 30)
    async with KafkaClient(settings, verdict_timeout_s=10.0) as client:
        crowd = [
            CrowdRun(
                await client.start_run(
                    f"crowd-{i}-{tag}",
                    "researcher",
                    TOOLS,
                    policy={"no_progress_threshold": OWN_FAILURE_LIMIT},
                )
            )
            for i in range(CROWD)
        ]
        print("`search` breaks for every run at once:\n", flush=True)
        members = [asyncio.create_task(crowd_member(m, scene)) for m in crowd]
        try:
            await asyncio.wait_for(scene.opened.wait(), OPEN_TIMEOUT_S)
            await asyncio.sleep(RECOVER_AFTER_S)
            scene.broken = False
            print("\n  `search` recovers; the runs told keep to fetch_page\n", flush=True)
            await asyncio.wait_for(scene.closed.wait(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            print("  the fleet app did not open and close the incident in time", flush=True)
        finally:
            scene.done = True
            scene.closed.set()
            await asyncio.gather(*members)
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    return crowd


def summary(crowd: list[CrowdRun]) -> None:
    for member in crowd:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(member.calls.items()))
        ending = "told by the fleet" if member.told else "not told"
        print(f"  {member.run.run_id:<22} {'a tool breaks for everyone':<28} {ending:<36} calls: {counts}")
