"""The hostile logs that once halted `stallwatch replay` (and every worker) replayed by the command
itself: exit 0 within seconds, every other run's commands the same as without the hostile run."""

from __future__ import annotations

import subprocess
import sys
import time

import orjson
import pytest

from tests.engine.test_hostile_input import BIG, healthy_runs, hostile_run, interleaved

HOSTILE = {
    "a global flag mid-list": (
        [{"name": "search", "volatile_patterns": ["\\d+ms", "(?i)token"]}],
        "a TOKEN 12ms",
    ),
    "one group name twice": ([{"name": "search", "volatile_patterns": ["(?P<t>a)", "(?P<t>b)"]}], "ab"),
    "catastrophic backtracking": ([{"name": "search", "volatile_patterns": ["(a+)+$"]}], "a" * 40 + "!"),
    "64 wildcard paths on a large result": (
        [{"name": "search", "volatile_fields": [f"*.*.*.z{n}" for n in range(64)]}],
        {
            f"k{i}": {f"m{j}": {f"n{k}": {"z1": 1, "t": "x" * 40} for k in range(40)} for j in range(40)}
            for i in range(BIG // 110_000)
        },
    ),
}


def replay(tmp_path, lines: list[bytes]) -> tuple[subprocess.CompletedProcess[bytes], float]:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\n".join(lines) + b"\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "replay", str(log)], capture_output=True, timeout=120
    )
    return done, time.monotonic() - started


def of_healthy(out: bytes) -> list[bytes]:
    return [line for line in out.splitlines() if orjson.loads(line)["run_id"].startswith("healthy")]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_log_replays_with_exit_0_in_seconds_and_changes_no_other_run(tmp_path, name):
    tools, result = HOSTILE[name]
    done, seconds = replay(tmp_path, interleaved(hostile_run(tools, result), *healthy_runs()))
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert seconds < 20
    alone, _ = replay(tmp_path, interleaved(*healthy_runs()))
    assert of_healthy(done.stdout) == of_healthy(alone.stdout)
    assert any(orjson.loads(line)["run_id"] == "hostile" for line in done.stdout.splitlines())
