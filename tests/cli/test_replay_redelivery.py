"""`stallwatch replay` of a log where a call is redelivered after its run ended."""

from __future__ import annotations

import orjson

from tests.cli.test_replay_command import replay
from tests.engine.test_redelivery import ended_run_with_a_redelivered_call


def test_replay_gives_no_second_verdict_for_a_call_redelivered_after_the_end():
    log = b"\n".join(ended_run_with_a_redelivered_call().lines()) + b"\n"
    done = replay(log, "-")
    assert done.returncode == 0, done.stderr
    commands = [orjson.loads(x) for x in done.stdout.splitlines()]
    verdicts = [(c["call_id"], c["decision"], c["code"]) for c in commands if c["type"] == "verdict"]
    assert verdicts == [("c1", "allow", None), ("c2", "allow", None)]
    ids = [c["command_id"] for c in commands]
    assert len(ids) == len(set(ids))
