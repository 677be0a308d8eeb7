"""Digests of every decision replay and the worker's batch step make, to compare before and after.

    python benchmarks/replay_hashes.py [--log benchmarks/data/fleet.jsonl] [--skip-fleet-log]

A change meant to keep every decision (a faster engine, a restructure) must print the same lines
before and after. For each log, unkeyed and keyed: the sha256 of `stallwatch replay`'s standard
output (the commands) and standard error (the dead letters), and of the worker's batch step
(`BatchApplier`) over the log cut into partitions and batches (its commands, their event times,
its dead letters, skipped offsets, per-type counts, tallies and the stored states). The logs: the
generated fleet log and the worker tests' log of replay_bench.py, and a mixed log made here from
a fixed seed that reaches what those two do not (coder runs, declared facts, volatile fields and
patterns, fingerprints in place of results, fleet advisories, redeliveries, bad input of every
kind the parser names).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import random
import sys
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests package

from stallwatch.cli.replay import replay
from stallwatch.cli.replay_engine import ReplayEngine
from stallwatch.contract.commands import encode_command
from stallwatch.contract.envelope import envelope
from stallwatch.contract.events import advisory_event_id
from stallwatch.engine.canonical import derive_secret, fingerprint
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.tallies import Tallies

HERE = Path(__file__).parent
# Runs of the mixed log: ~60,000 events, every path many times, a few seconds to replay.
MIXED_RUNS = 1500
# The worker's partitions and the records per batch the batch step is given.
PARTITIONS = 4
BATCH = 64


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def replay_digests(lines: list[bytes], secret: bytes | None) -> tuple[str, str]:
    out, err = io.BytesIO(), io.BytesIO()
    replay(io.BytesIO(b"\n".join(lines) + b"\n"), out, err, "log", ReplayEngine(secret=secret))
    return sha(out.getvalue()), sha(err.getvalue())


def batch_digest(lines: list[bytes], secret: bytes | None) -> str:
    """The batch step over the log: records keyed by their run, spread over partitions in order;
    each partition's states kept between batches as the worker's store keeps them (as bytes)."""
    by_partition: dict[int, list[SourceMessage]] = {p: [] for p in range(PARTITIONS)}
    for n, line in enumerate(lines):
        try:
            key = orjson.loads(line).get("run_id")
            key = key.encode() if type(key) is str else None
        except (orjson.JSONDecodeError, AttributeError):
            key = b"bad"
        if n % 97 == 5:
            key = b"not-its-run"  # a key that is not the event's run: a dead letter
        partition = zlib_crc(key) % PARTITIONS
        records = by_partition[partition]
        records.append(
            SourceMessage(
                key,
                None if n % 1013 == 7 else line,
                partition,
                len(records),
                timestamp=1_000_000 + n,
                timestamp_type=n % 2,
            )
        )
    applier = BatchApplier(Detector(secret=secret), "events", tallies=Tallies(secret))
    h = hashlib.sha256()
    for records in by_partition.values():
        stored: dict[str, bytes] = {}
        clock = PartitionClock()
        for start in range(0, len(records), BATCH):
            batch = records[start : start + BATCH]
            if start and start % (BATCH * 7) == 0:
                batch = records[start - 3 : start] + batch  # offsets applied already: skipped
            result = applier.apply(batch, partial(_load, stored), clock, 2_000_000.0 + start)
            for command in result.commands:
                h.update(encode_command(command))
            h.update(orjson.dumps(result.caused_at))
            for key, letter, reason in result.letters:
                h.update(repr((key, letter, reason)).encode())
            h.update(
                orjson.dumps(
                    [
                        result.skipped,
                        sorted(result.events_by_type.items()),
                        [(k, v) for k, v in result.tallies],
                        clock.newest,
                    ],
                    option=orjson.OPT_PASSTHROUGH_DATACLASS,
                    default=repr,
                )
            )
            for run_id in sorted(result.states):
                raw = result.states[run_id].to_bytes()
                stored[run_id] = raw
                h.update(run_id.encode() + raw)
    return h.hexdigest()[:16]


def _load(stored: dict[str, bytes], run_id: str) -> RunState | None:
    raw = stored.get(run_id)
    return None if raw is None else RunState.from_bytes(raw)


def zlib_crc(key: bytes | None) -> int:
    return zlib.crc32(key or b"")


def mixed_log(runs: int = MIXED_RUNS, seed: int = 16) -> list[bytes]:
    """Runs of every mode with every declaration, interleaved, with redeliveries and bad lines."""
    rng = random.Random(seed)
    logs = [_mixed_run(rng, i) for i in range(runs)]
    lines: list[bytes] = []
    cursors = [0] * len(logs)
    live = list(range(len(logs)))
    while live:
        i = rng.choice(live)
        lines.append(logs[i][cursors[i]])
        cursors[i] += 1
        if cursors[i] == len(logs[i]):
            live.remove(i)
        if rng.random() < 0.02 and lines:
            lines.append(rng.choice(lines[-600:]))  # a redelivery, near or beyond the id window
        if rng.random() < 0.01:
            lines.append(_bad_line(rng, _last_event(lines)))
    return lines


def _last_event(lines: list[bytes]) -> bytes:
    """The newest line that parses as an event's object: the last one, unless a redelivery just
    repeated a malformed line (then the one before it that parses)."""
    for line in reversed(lines):
        with contextlib.suppress(orjson.JSONDecodeError):
            if isinstance(orjson.loads(line), dict):
                return line
    raise ValueError("no event to spoil yet")


_TOOLS = ("search", "fetch", "wait", "edit", "bash")


def _mixed_run(rng: random.Random, index: int) -> list[bytes]:
    mode = rng.choice(("researcher", "researcher", "chat", "coder"))
    run_id = f"m{index}-" + ("r" * 140 if rng.random() < 0.02 else "r")  # some over the id limit
    loopy = rng.random() < 0.5  # the same few calls and results again and again
    tools: list[dict] = [
        {
            "name": "search",
            "facts": {"path": "docs", "key": rng.choice(("id", None))},
            "volatile_fields": ["took_ms", "docs.*.score"],
        },
        {"name": "fetch", "volatile_patterns": [r"\d+ ms"]},
        {"name": "wait", "repeat_exempt": True},
        {"name": "edit", "effect": "write", "requires_approval": rng.random() < 0.3},
        {"name": "bash", "effect": rng.choice(("read", "unknown"))},
    ]
    policy = rng.choice(
        (
            None,
            None,
            {"nudge_at": 2},
            {"call_budget": 9, "max_rounds": 6},
            {"time_limit_s": 30.0},
            {"cycle_threshold": 2, "loop_detect_threshold": 2},
            {"stall_nudge_at": 2, "stall_stop_at": 3},
            {"fleet_breaker": True},
            {"no_progress_threshold": 2, "overloaded_exempt_max": 0},
        )
    )
    ts = 1000.0 + index * 3
    events: list[dict] = []

    def add(kind: str, **fields) -> None:
        nonlocal ts
        events.append(envelope(kind, run_id, f"{run_id[:12]}/{len(events)}", ts, **fields))
        ts += rng.choice((0.25, 0.5, 2.0))

    start: dict = {"mode": mode, "tools": rng.choice((tools, tools[2:], tools[:1]))}
    if policy:
        start["policy"] = policy
    if rng.random() < 0.5:
        start["tenant"] = rng.choice(("acme", "globex", "t" * 150))
    add("run_started", **start)
    call = 0
    for number in range(1, rng.randint(2, 14)):
        if rng.random() > 0.1:
            add("round_started", round=number)
        for _ in range(rng.randint(0, 4)):
            call += 1
            tool = rng.choice(_TOOLS)
            call_id = f"c{call}" if rng.random() > 0.02 else "c" * 200
            add("call_proposed", **_proposed(rng, loopy, number, call_id, tool))
            if rng.random() < 0.15:
                continue  # no result (refused, or lost)
            add("call_result", round=number, call_id=call_id, tool=tool, **_result_fields(rng, loopy, tool))
        if rng.random() < 0.05:
            events.append(_advisory(rng, run_id, ts))
        if rng.random() > 0.1:
            add("round_ended", round=number)
    if rng.random() < 0.8:
        add("run_ended", reason="done")
    return [orjson.dumps(e) for e in events]


def _proposed(rng: random.Random, loopy: bool, number: int, call_id: str, tool: str) -> dict:
    args = (
        {"q": 1}
        if loopy and rng.random() < 0.8
        else rng.choice(({"q": rng.randint(0, 3)}, {"q": 1}, '{"q": 1}', "plain", None))
    )
    proposed: dict = {"round": number, "call_id": call_id, "tool": tool, "args": args}
    if rng.random() < 0.1:
        proposed = {
            "round": number,
            "call_id": call_id,
            "tool": tool,
            "args_digest": rng.choice(("ab" * 16, "not hex")),
        }
    if tool in ("edit", "bash") and rng.random() < 0.2:
        proposed["effect"] = rng.choice(("read", "write", "unknown"))
    return proposed


def _result_fields(rng: random.Random, loopy: bool, tool: str) -> dict:
    """A call_result's status, and its result or the result's fingerprints."""
    status = rng.choice(("ok", "ok", "ok", "error", "overloaded"))
    result = _result(random.Random(tool) if loopy else rng, tool)
    if rng.random() < 0.15:
        hexed, empty = fingerprint(result)
        fields: dict = {"status": status, "fingerprint": hexed, "empty": empty}
        if tool == "search" and rng.random() < 0.5:
            fields["fact_fingerprints"] = [str(rng.randint(0, 5)) for _ in range(2)]
        return fields
    return {"status": status, "result": result}


def _advisory(rng: random.Random, run_id: str, ts: float) -> dict:
    incident = f"inc-{rng.randint(0, 9)}"
    state = rng.choice(("open", "open", "closed"))
    advisory = envelope(
        "fleet_advisory",
        run_id,
        advisory_event_id(incident, run_id, state),
        ts,
        incident_id=incident,
        incident=state,
        tool=rng.choice(_TOOLS),
        window_s=60.0,
        evidence={"calls": 40, "failures": 30, "runs": 5},
    )
    advisory["kind"] = rng.choice(("tool_failing", "tool_same_answer"))
    return advisory


def _result(rng: random.Random, tool: str) -> object:
    n = rng.randint(0, 3)
    if tool == "search":
        return {
            "took_ms": rng.randint(1, 90),
            "docs": [{"id": f"d{rng.randint(0, 4)}", "score": rng.random()} for _ in range(n)],
        }
    if tool == "fetch":
        return f"fetched page {rng.randint(0, 2)} in {rng.randint(1, 900)} ms"
    if tool == "bash":
        return rng.choice(("", "ok", f"FAILED test_{n}", {"exit": n, "out": "x" * n}))
    return rng.choice(({}, [], {"state": "running"}, {"n": n}, '{"a": [1, 2]}', 0))


def _bad_line(rng: random.Random, good: bytes) -> bytes:
    """Input the parser refuses, or a shape only pydantic decides: one of each kind it names."""
    event = orjson.loads(good)
    spoiled = _SPOILERS[rng.randrange(len(_SPOILERS))](rng, good, event)
    return spoiled if isinstance(spoiled, bytes) else orjson.dumps(spoiled)


def _pop_field(rng: random.Random, event: dict) -> dict:
    event.pop(rng.choice([k for k in event if k not in ("v", "type")] or ["v"]))
    return event


def _bad_run_started(rng: random.Random, event: dict) -> dict:
    return {
        "v": 1,
        "type": "run_started",
        "event_id": "s",
        "run_id": event["run_id"],
        "ts": 5,
        "mode": rng.choice(("coder", "pirate")),
        "tools": [{"name": "t" * rng.choice((3, 200))}],
        "policy": {"max_rounds": "3"},
    }


# Each kind of bad line from a good one: bytes as they are, or the event changed and encoded.
_SPOILERS: tuple[Callable[[random.Random, bytes, dict], bytes | dict], ...] = (
    lambda rng, good, event: good[: len(good) // 2],  # malformed
    lambda rng, good, event: b"[1, 2]",
    lambda rng, good, event: b"   ",  # blank: skipped
    lambda rng, good, event: {**event, "v": rng.choice((2, True, "1", 1.0))},
    lambda rng, good, event: {**event, "type": rng.choice(("call_made", 3))},
    lambda rng, good, event: _pop_field(rng, event),
    lambda rng, good, event: {**event, "ts": rng.choice((int(event["ts"]), "soon", None))},
    lambda rng, good, event: {**event, "round": rng.choice((-1, 1.5, "2"))},
    lambda rng, good, event: {**event, "extra_field": {"nested": [1, 2]}},
    lambda rng, good, event: {**event, "run_id": "x" * 200},
    lambda rng, good, event: b"[" * 2000 + b"]" * 2000,  # too deep
    lambda rng, good, event: (
        b'{"v": 1, "type": "run_started", "pad": "' + b"p" * 1_100_000 + b'"}'
    ),  # too large
    lambda rng, good, event: {**event, "status": rng.choice(("fine", None))},
    lambda rng, good, event: b"\xff\xfe not utf-8",
    lambda rng, good, event: _bad_run_started(rng, event),
    lambda rng, good, event: good + b"\r\n",  # a Windows line end
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", default=str(HERE / "data" / "fleet.jsonl"))
    parser.add_argument("--skip-fleet-log", action="store_true", help="the two smaller logs only")
    args = parser.parse_args()
    from benchmarks.replay_bench import worker_tests_log

    logs: dict[str, Callable[[], list[bytes]]] = {
        "worker tests' log": worker_tests_log,
        "mixed log": mixed_log,
    }
    if not args.skip_fleet_log:
        logs["fleet log"] = lambda: Path(args.log).read_bytes().splitlines()
    secret = derive_secret("replay hashes")
    print(f"{'log':<20}{'keyed':<7}{'replay commands':<18}{'dead letters':<18}{'batch step':<18}")
    for name, make in logs.items():
        lines = make()
        for keyed in (False, True):
            key = secret if keyed else None
            commands, letters = replay_digests(lines, key)
            batch = batch_digest(lines, key) if name != "fleet log" else "-"
            print(f"{name:<20}{'yes' if keyed else 'no':<7}{commands:<18}{letters:<18}{batch:<18}")


if __name__ == "__main__":
    main()
