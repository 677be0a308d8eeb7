"""`stallwatch replay` of a log where a call is redelivered after its run ended."""

from __future__ import annotations

import orjson

from tests.cli.test_replay_command import replay
from tests.engine.test_redelivery import ended_run_with_a_redelivered_call, long_run


def test_replay_gives_no_second_verdict_for_a_call_redelivered_after_the_end():
    log = b"\n".join(ended_run_with_a_redelivered_call().lines()) + b"\n"
    done = replay(log, "-")
    assert done.returncode == 0, done.stderr
    commands = [orjson.loads(x) for x in done.stdout.splitlines()]
    verdicts = [(c["call_id"], c["decision"], c["code"]) for c in commands if c["type"] == "verdict"]
    assert verdicts == [("c1", "allow", None), ("c2", "allow", None)]
    ids = [c["command_id"] for c in commands]
    assert len(ids) == len(set(ids))


def test_replay_gives_one_content_per_id_for_calls_redelivered_beyond_the_window():
    """Redeliveries in replay: round-1 calls redelivered after 600 events, in a stopped run
    and after a run's end, got `run_stopped` under the id that carried `allow`."""
    stopped = long_run(27, policy={"max_rounds": 27})
    stopped.events.append(dict(stopped.events[2]))
    ended = long_run(27, run_id="run-2")
    ended.end()
    ended.events.append(dict(ended.events[2]))
    log = b"\n".join(stopped.lines() + ended.lines()) + b"\n"
    done = replay(log, "-")
    assert done.returncode == 0, done.stderr
    commands = [orjson.loads(x) for x in done.stdout.splitlines()]
    contents: dict[str, dict] = {}
    for command in commands:
        assert contents.setdefault(command["command_id"], command) == command
    redelivered = {stopped.events[2]["event_id"], ended.events[2]["event_id"]}
    answers = [(c["run_id"], c["decision"]) for c in commands if c["caused_by"] in redelivered]
    assert answers == [("run-1", "allow"), ("run-2", "allow")]  # the first answers, once each
    assert any(c["type"] == "stop" for c in commands)
