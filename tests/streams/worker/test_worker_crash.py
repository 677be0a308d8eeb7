"""An event that kills every worker applying it: the first death finds the batch, the second
the event, and the third worker dead-letters it, quarantines its run and moves on. Every other
run's commands equal replay's, and the poison run's equal replay's with the event as an engine
fault."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from stallwatch.engine.rules.researcher import ResearcherRules
from stallwatch_streams.worker.batch import WORKER_CRASH
from tests.kafka_harness import (
    PROBE_PREFIX,
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    stored_events,
    wait_until_serving,
)
from tests.script import RunScript
from tests.streams.worker import injected_crash
from tests.streams.worker.faults import MODELS
from tests.streams.worker.fleet_logs import interleave, mixed_fleet

pytestmark = pytest.mark.kafka


def poison_run() -> RunScript:
    s = RunScript("poison", tools=[{"name": "search"}, {"name": injected_crash.TOOL}])
    s.round_of(("search", {"q": "a"}, {"items": [1]}))
    s.round_of((injected_crash.TOOL, {"q": "b"}, "r"))  # every worker applying this dies
    for _ in range(6):
        s.round_of(("search", {"q": "a"}, {"items": [1]}))
    s.end()
    return s


async def dies(worker: WorkerProcess) -> int:
    return await asyncio.to_thread(worker.proc.wait, 120)


@pytest.mark.parametrize("model", MODELS)
async def test_an_event_that_kills_its_worker_twice_is_dead_lettered_by_the_third(
    tmp_path, monkeypatch, model
):
    (tmp_path / "sitecustomize.py").write_text(injected_crash.SITECUSTOMIZE)
    env = {**MODELS[model], "PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[3]}"}
    settings = fresh_settings(1)
    fleet = mixed_fleet(12, rounds=6)
    log = interleave([*fleet[:6], poison_run(), *fleet[6:]])
    with monkeypatch.context() as patched:
        patched.setattr(ResearcherRules, "refusal", injected_crash.as_engine_fault(ResearcherRules.refusal))
        expected = by_run(replay_commands(log))
    first = WorkerProcess(settings, "first", env)
    workers = [first]
    try:
        await wait_until_serving(settings)
        await produce(settings, log)
        assert await dies(first) == -9, first.log_tail()  # the batch that holds the event
        second = WorkerProcess(settings, "second", env)
        workers.append(second)
        assert await dies(second) == -9, second.log_tail()  # careful: the event itself
        assert "applying them one at a time" in second.log_tail(200)
        third = WorkerProcess(settings, "third", env)
        workers.append(third)
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 120, settle_s=SETTLE_S
        )
        letters = await collect(settings, settings.deadletter_topic, 1, 30)
        assert third.alive(), third.log_tail()
        stored = await stored_events(settings)
    finally:
        for worker in workers:
            worker.stop()
    assert {run: c for run, c in by_run(got).items() if not run.startswith(PROBE_PREFIX)} == expected
    assert len(letters) == 1, letters
    letter = orjson.loads(letters[0])
    assert letter["error"] == WORKER_CRASH and letter["raw"] == ""
    poison_event = orjson.loads(stored[letter["offset"]])
    assert (poison_event["run_id"], poison_event.get("tool")) == ("poison", injected_crash.TOOL)
