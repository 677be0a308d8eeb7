"""A rolling update from the previous release and a rollback to it, under load, on a real broker:
workers of both releases share one group and hand partitions (their changelog of run states and
positions) to each other, and every run's commands equal replay's, with no worker exit."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest

from stallwatch.settings import Settings
from tests.kafka_harness import (
    SETTLE_S,
    StallwatchProcess,
    WorkerProcess,
    by_run,
    collect,
    free_port,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.worker.faults import Outcome, _compare
from tests.streams.worker.fleet_logs import interleave, mixed_fleet
from tests.upgrade.previous_release import PREVIOUS_VERSION, ROOT, previous_release_python

pytestmark = pytest.mark.kafka

RELEASE = (ROOT / "pyproject.toml").read_text().split('version = "', 1)[1].split('"', 1)[0]
# 400 events a second: each slice of the log is still arriving while a worker is replaced.
EVERY, PAUSE_S = 40, 0.1


class PreviousWorker(WorkerProcess):
    """`stallwatch worker` of the previous release, from its own venv: nothing of this checkout
    on its path (the harness's PYTHONPATH is emptied, its directory is the release's own)."""

    def __init__(self, settings: Settings, name: str, python: Path) -> None:
        self.web_port, self.metrics_port = free_port(), free_port()
        StallwatchProcess.__init__(
            self,
            settings,
            "worker",
            name,
            {
                "STALLWATCH_WEB_PORT": str(self.web_port),
                "STALLWATCH_METRICS_PORT": str(self.metrics_port),
                "STALLWATCH_LOG_LEVEL": "INFO",
                "PYTHONPATH": "",
            },
            argv=[str(python), "-m", "stallwatch.cli.main", "worker"],
            cwd=str(python.parents[2]),
        )


def release_of(worker: WorkerProcess) -> str:
    """The release a worker says it runs (`stallwatch_build_info`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.metrics_port}/metrics", timeout=5) as r:
        body = r.read().decode()
    line = next(line for line in body.splitlines() if line.startswith("stallwatch_build_info{"))
    return line.split('version="', 1)[1].split('"', 1)[0]


async def replace(old: WorkerProcess, new: WorkerProcess) -> WorkerProcess:
    """One step of a rolling update: the new pod ready, then the old one stopped (SIGTERM), as a
    Deployment with maxSurge 1 does. The old one must still be running, and stop cleanly."""
    await new.ready(timeout_s=90)
    assert old.alive(), f"{old.log_path} exited on its own:\n{old.log_tail()}"
    old.stop()
    assert old.proc.returncode == 0, f"{old.log_path} stopped with {old.proc.returncode}:\n{old.log_tail()}"
    return new


async def test_a_rolling_update_from_the_previous_release_and_a_rollback_change_no_decision():
    python = await asyncio.to_thread(previous_release_python)
    settings = fresh_settings(partitions=6)
    log = interleave(mixed_fleet(240))
    expected = by_run(replay_commands(log))
    slices = [log[i * len(log) // 5 : (i + 1) * len(log) // 5] for i in range(5)]
    workers: list[WorkerProcess] = []

    def start(kind: str, name: str) -> WorkerProcess:
        worker = PreviousWorker(settings, name, python) if kind == "old" else WorkerProcess(settings, name)
        workers.append(worker)
        return worker

    try:
        a, b = start("old", "a-old"), start("old", "b-old")
        await wait_until_serving(settings, timeout_s=120)
        await b.ready(timeout_s=90)
        assert {release_of(a), release_of(b)} == {PREVIOUS_VERSION}
        await produce(settings, slices[0], pause_every=EVERY, pause_s=PAUSE_S)
        # The rolling update, one worker at a time, each step under load; then the rollback.
        steps = [("a", "new"), ("b", "new"), ("a", "old"), ("b", "old")]
        for number, (which, kind) in enumerate(steps, start=1):
            producing = asyncio.create_task(
                produce(settings, slices[number], pause_every=EVERY, pause_s=PAUSE_S)
            )
            if which == "a":
                a = await replace(a, start(kind, f"a-{kind}-{number}"))
            else:
                b = await replace(b, start(kind, f"b-{kind}-{number}"))
            await producing
            for worker in (a, b):
                assert worker.alive(), f"{worker.log_path} exited:\n{worker.log_tail()}"
            if number == 2:
                assert {release_of(a), release_of(b)} == {RELEASE}
        assert {release_of(a), release_of(b)} == {PREVIOUS_VERSION}
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 180, settle_s=SETTLE_S
        )
        assert a.alive() and b.alive(), (a.log_tail(), b.log_tail())
    finally:
        for worker in workers:
            worker.stop()
    outcome = Outcome(runs=len(expected))
    _compare(outcome, expected, got)
    assert outcome.exact, outcome.summary()
    for worker in workers:
        text = worker.log_path.read_text(errors="replace")
        assert "Traceback" not in text and "does not read" not in text, worker.log_tail()
