"""`stallwatch replay` end to end, as a process: stdout commands, stderr dead letters, exit 0."""

from __future__ import annotations

import subprocess
import sys

import orjson

from stallwatch.contract.envelope import envelope
from tests.script import RunScript


def replay(stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "replay", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def looping_and_paging_log() -> tuple[list[bytes], list[bytes]]:
    loop, paging = RunScript("looper"), RunScript("pager")
    for i in range(8):
        loop.round_of(("search", {"q": f"wording {i}"}, {"docs": ["d1", "d2"]}))
        paging.round_of(("search", {"q": "x", "page": i}, {"docs": [i]}))
    return loop.lines(), paging.lines()


def interleave(*logs: list[bytes]) -> list[bytes]:
    out = []
    for i in range(max(map(len, logs))):
        out.extend(log[i] for log in logs if i < len(log))
    return out


def test_replay_answers_from_stdin_in_order():
    loop, paging = looping_and_paging_log()
    done = replay(b"\n".join(interleave(loop, paging)) + b"\n", "-")
    assert done.returncode == 0, done.stderr
    commands = [orjson.loads(x) for x in done.stdout.splitlines()]
    stops = [(c["run_id"], c["code"], c["round"]) for c in commands if c["type"] == "stop"]
    assert stops == [("looper", "no_new_facts", 6)]
    assert sum(c["type"] == "verdict" for c in commands) == 16
    assert done.stderr == b""


def test_garbage_does_not_stop_replay_or_change_other_runs(tmp_path):
    loop, paging = looping_and_paging_log()
    clean = replay(b"\n".join(interleave(loop, paging)) + b"\n", "-")
    bad = [
        b"garbage",
        b'{"v": 2, "type": "round_started"}',
        b'{"v":1,"type":"meteor_strike","event_id":"x","run_id":"pager","ts":1}',
        orjson.dumps(
            envelope(
                "call_result",
                "pager",
                "big",
                1,
                round=1,
                call_id="c",
                tool="search",
                status="ok",
                result="x" * 5_000_000,
            )
        ),
        b'{"v":1,"type":"call_result","result":' + b"[" * 3000 + b"]" * 3000 + b"}",
        b"\xff\xfe binary \x00",
    ]
    dirty = interleave(loop, bad, paging)
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\n".join(dirty) + b"\n")
    done = replay(b"", str(path))
    assert done.returncode == 0
    assert done.stdout == clean.stdout  # the same commands, byte for byte
    letters = [orjson.loads(x) for x in done.stderr.splitlines()]
    assert len(letters) == len(bad)
    assert {tuple(sorted(x)) for x in letters} == {
        (
            "error",
            "offset",
            "partition",
            "raw",
            "raw_digest",
            "raw_kept",
            "raw_size",
            "raw_truncated",
            "topic",
        )
    }
    assert letters[3]["raw"] == "" and letters[3]["raw_size"] == len(bad[3])
    assert [x["offset"] for x in letters] == [dirty.index(b) for b in bad]
    assert "over the limit" in letters[3]["error"] and "deeper than 1024" in letters[4]["error"]


def test_replaying_the_same_log_twice_gives_identical_commands():
    loop, paging = looping_and_paging_log()
    log = b"\n".join(interleave(loop, paging)) + b"\n"
    assert replay(log, "-").stdout == replay(log, "-").stdout


def test_replay_applies_tool_declarations_and_writes_nudges():
    tool = {"name": "search", "facts": {"path": "items", "key": "id"}, "volatile_fields": ["took_ms"]}
    s = RunScript("declared", tools=[tool])
    for i in range(8):
        items = [{"id": "a", "score": i}, {"id": "b", "score": -i}][:: 1 if i % 2 else -1]
        s.round_of(("search", {"q": f"wording {i}"}, {"took_ms": i, "items": items}))
    done = replay(b"\n".join(s.lines()) + b"\n", "-")
    commands = [orjson.loads(x) for x in done.stdout.splitlines()]
    assert [(c["type"], c["round"]) for c in commands if c["type"] != "verdict"] == [
        ("nudge", 4),
        ("stop", 6),
    ]
