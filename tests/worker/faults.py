"""A hostile operator's scenario on a real broker: SIGKILLs under steady load, one of them while the
group rebalances, and every run's commands compared with a crash-free replay.

Shared by the test (one pass) and `benchmarks/kill_loop.py` (twenty passes in a row).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson

from tests.kafka_harness import (
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.worker.fleet_logs import interleave, mixed_fleet

# A steady 800 events/s: 80 events, then a pause of 0.1 s.
STEADY_EVERY, STEADY_PAUSE_S = 80, 0.1


@dataclass
class Outcome:
    """What a scenario saw: the runs whose commands differ from replay, and any command id
    published more than once (with transactions, there must be none)."""

    runs: int
    differing: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return not self.differing and not self.doubled


async def _rebalancing(worker: WorkerProcess, since: int, timeout_s: float) -> None:
    """Until the worker's log shows a rebalance beyond the first `since` ones."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.log_path.read_text(errors="replace").count("Revoking previously") > since:
            return
        await asyncio.sleep(0.02)


async def three_kills(partitions: int = 8, runs: int = 480) -> Outcome:
    """Two workers; SIGKILL one and restart it; SIGKILL the other while the group rebalances
    for the restarted one; later SIGKILL again; all under a steady load."""
    settings = fresh_settings(partitions)
    log = interleave(mixed_fleet(runs))
    expected = by_run(replay_commands(log))
    a = WorkerProcess(settings, "a")
    workers = [a]
    outcome = Outcome(runs=len(expected))
    begin = time.monotonic()
    try:
        await wait_until_serving(settings)
        b = WorkerProcess(settings, "b")
        workers.append(b)
        await b.ready()
        producing = asyncio.create_task(produce(settings, log, pause_every=STEADY_EVERY,
                                                    pause_s=STEADY_PAUSE_S))
        await asyncio.sleep(3)
        a.kill()
        outcome.kills.append("a, under load")
        revokes = b.log_path.read_text(errors="replace").count("Revoking previously")
        a = WorkerProcess(settings, "a2")
        workers.append(a)
        await _rebalancing(b, revokes, timeout_s=30)
        b.kill()
        outcome.kills.append("b, while the group rebalanced for a2")
        b = WorkerProcess(settings, "b2")
        workers.append(b)
        await b.ready(timeout_s=60)
        await asyncio.sleep(2)
        a.kill()
        outcome.kills.append("a2, after b2 joined")
        a = WorkerProcess(settings, "a3")
        workers.append(a)
        assert not producing.done(), "the log ended before the third kill: make it longer"
        await producing
        got = await collect(settings, settings.commands_topic, sum(map(len, expected.values())) + 1, 180)
    finally:
        for worker in workers:
            worker.stop()
    ids = Counter(orjson.loads(raw)["command_id"] for raw in got)
    outcome.doubled = [command_id for command_id, n in ids.items() if n > 1]
    runs_got = by_run(got)
    outcome.differing = [run for run in expected if runs_got.get(run) != expected[run]]
    outcome.seconds = time.monotonic() - begin
    return outcome
