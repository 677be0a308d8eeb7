"""A poison run on every partition while two workers serve steady load: the hostile declarations
that once halted every worker, and a fault of the engine itself (a bug injected into both worker
processes for one tool). Both workers stay up and every run's commands equal replay's."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from stallwatch.engine.rules.researcher import ResearcherRules
from stallwatch_streams.fleet.tasks import partition_of
from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.script import RunScript
from tests.streams.worker import injected_bug
from tests.streams.worker.faults import MODELS
from tests.streams.worker.fleet_logs import interleave, mixed_fleet
from tests.waiting import until

pytestmark = pytest.mark.kafka

PARTITIONS = 4
HOSTILE_TOOLS = [
    {
        "name": "search",
        "volatile_patterns": ["\\d+ms", "(?i)token", "(a+)+$"],
        "volatile_fields": [f"*.*.*.z{n}" for n in range(64)],
    },
    {"name": injected_bug.TOOL},
]


def hostile_result() -> dict:
    """A result the declarations work hard on: nested for the paths, long runs of `a` for the
    pattern that backtracks without end on Python's `re`."""
    return {
        f"k{i}": {f"m{j}": {"n": {"z1": 1, "text": "a" * 2_000 + "!"}} for j in range(10)} for i in range(10)
    }


def poison_runs() -> list[RunScript]:
    runs, n = [], 0
    for partition in range(PARTITIONS):
        while partition_of(f"poison-{n}".encode(), PARTITIONS) != partition:
            n += 1
        s = RunScript(f"poison-{n}", tools=HOSTILE_TOOLS)
        s.round_of(("search", {"q": "a"}, hostile_result()))
        s.round_of((injected_bug.TOOL, {"q": "b"}, "r"))  # the engine fails here: the run is quarantined
        for _ in range(6):
            s.round_of(("search", {"q": "a"}, hostile_result()))
        runs.append(s)
        n += 1
    return runs


@pytest.mark.parametrize("model", MODELS)
async def test_a_poison_run_on_every_partition_leaves_both_workers_and_every_other_run(
    tmp_path, monkeypatch, model: str
):
    (tmp_path / "sitecustomize.py").write_text(injected_bug.SITECUSTOMIZE)
    env = {**MODELS[model], "PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[3]}"}
    settings = fresh_settings(PARTITIONS)
    healthy = mixed_fleet(120)
    log = interleave([*healthy[:60], *poison_runs(), *healthy[60:]])
    with monkeypatch.context() as patched:
        patched.setattr(ResearcherRules, "refusal", injected_bug.with_bug(ResearcherRules.refusal))
        expected = by_run(replay_commands(log))
    a = WorkerProcess(settings, "a", env)
    b = None
    try:
        await wait_until_serving(settings)
        b = WorkerProcess(settings, "b", env)
        await b.ready()
        await produce(settings, log, pause_every=200, pause_s=0.05)
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 120, settle_s=SETTLE_S
        )
        letters = await collect(settings, settings.deadletter_topic, PARTITIONS, 20)
        # Commands go out ahead of their batch's commit: both workers live on past every commit.
        healthy_events = sum(len(s.lines()) for s in healthy)
        await until(
            lambda: sum(w.metric("stallwatch_events_consumed_total") for w in (a, b)) >= healthy_events,
            60,
            lambda: f"every healthy event's batch committed:\n{a.log_tail()}\n{b.log_tail()}",
            interval_s=0.2,
        )
        assert a.alive(), a.log_tail()
        assert b.alive(), b.log_tail()
    finally:
        a.stop()
        if b is not None:
            b.stop()
    runs = by_run(got)
    assert {run: runs.get(run) for run in expected} == expected
    faults = [orjson.loads(letter) for letter in letters]
    assert len(faults) == PARTITIONS, faults
    assert {f["partition"] for f in faults} == set(range(PARTITIONS))
    assert all("KeyError" in f["error"] and "quarantined" in f["error"] for f in faults)
    assert injected_bug.MESSAGE not in orjson.dumps(faults).decode()
    quarantined = [
        orjson.loads(c) for run, commands in runs.items() if run.startswith("poison") for c in commands[1:]
    ]
    assert quarantined and all(c["decision"] == "allow" for c in quarantined)
