"""Replay throughput against orjson parse-only on the same lines, two fleet logs side by side.

    python benchmarks/replay_bench.py [--log benchmarks/data/fleet.jsonl]

The logs: the generated fleet log (`fleet_log.py`, made first when missing; large results) and
the worker tests' fleet log (`tests/streams/worker/fleet_logs.py`: every rule, then loopers,
pagers and insisting chats; small events). For each, events/s of parsing each line with orjson
alone and of a full replay (parse, validate, detect, encode every command), measured one after
the other in this run, and their ratio, beside the contract's floor (`contract_floor`) and
parse-and-validate alone; then `stallwatch replay` of the fleet log file in one process and with
`--jobs 2`; then the memory each fingerprint held costs and a typical run's serialised state.
Instruction counts, steady under load: replay_instructions.py.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson
from xxhash import xxh3_64_intdigest, xxh3_128_digest, xxh3_128_hexdigest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests package

from stallwatch.contract.commands import encode_command
from stallwatch.contract.parse import parse_event
from stallwatch.engine.canonical import derive_secret
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from tests.streams.worker.fleet_logs import every_rule, interleave, mixed_fleet

HERE = Path(__file__).parent
_SORT = orjson.OPT_SORT_KEYS
# The fingerprint key of --keyed runs.
BENCH_KEY = "benchmark fingerprint key"
# Runs of the worker tests' mixed fleet: ~128,000 events, enough to time steadily.
WORKER_LOG_RUNS = 3000


def best_of(runs: int, fn) -> float:
    """The fastest of several timed runs: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def parse_only(lines: list[bytes]) -> None:
    loads = orjson.loads
    for line in lines:
        loads(line)


def validated_parse(lines: list[bytes]) -> None:
    """Parse and validate each line (`parse_event`), as replay does first: the floor under it."""
    for line in lines:
        parse_event(line)


def contract_floor(lines: list[bytes]) -> None:
    """What contract v1 asks of any replay in C calls alone, with no validation, rule or state:
    parse each line, digest its event id (redeliveries), a call's tool and canonical arguments
    (its signature), a result's canonical content (its fact), and for each call build a
    verdict, digest it (its content id) and encode it. Whatever a Python engine adds, it adds
    to this."""
    loads, dumps = orjson.loads, orjson.dumps
    for line in lines:
        event = loads(line)
        xxh3_64_intdigest(event["event_id"].encode())
        kind = event["type"]
        if kind == "call_proposed":
            xxh3_128_digest(event["tool"].encode() + b"\x00" + dumps(event.get("args"), option=_SORT))
            command = {
                "v": 1,
                "command_id": "",
                "run_id": event["run_id"],
                "caused_by": event["event_id"],
                "round": event["round"],
                "type": "verdict",
                "call_id": event["call_id"],
                "decision": "allow",
                "code": None,
                "reason": "Allowed.",
                "tool": event["tool"],
            }
            command["command_id"] = xxh3_128_hexdigest(dumps(command))[:24]
            dumps(command)
        elif kind == "call_result" and "result" in event:
            xxh3_128_digest(dumps(event["result"], option=_SORT))


def full_replay(lines: list[bytes], secret: bytes | None = None) -> tuple[int, int]:
    commands = rejected = 0
    for result in EmbeddedEngine(secret=secret).replay(lines):
        if isinstance(result, Rejected):
            rejected += 1
        else:
            for command in result:
                encode_command(command)
                commands += 1
    return commands, rejected


def state_sizes(lines: list[bytes]) -> None:
    """Replay part of the log, then weigh the fingerprints and the states of the live runs."""
    fleet = EmbeddedEngine()
    for _ in fleet.replay(lines):
        pass
    live = [s for s in fleet.runs.values() if not s.ended and s.mode == "researcher"]
    held = sum(len(s.fingerprints) for s in live)
    memory = sum(sys.getsizeof(s.fingerprints) + sum(map(sys.getsizeof, s.fingerprints)) for s in live)
    serialised = sorted(len(s.to_bytes()) for s in live)
    with_fps = [s for s in live if s.fingerprints]
    per_fp_wire = statistics.median(
        (len(s.to_bytes()) - len(_without_fingerprints(s))) / len(s.fingerprints) for s in with_fps
    )
    print(f"live researcher runs            {len(live):>12,}")
    print(f"fingerprints held               {held:>12,}")
    print(f"memory per fingerprint held     {memory / held:>12.0f} bytes (dict slot + 16-byte digest)")
    print(f"serialised per fingerprint      {per_fp_wire:>12.0f} bytes (in the changelog)")
    print(
        f"serialised run state, median    {statistics.median(serialised):>12,.0f} bytes "
        f"(p90 {serialised[len(serialised) * 9 // 10]:,}, max {serialised[-1]:,})"
    )


def _without_fingerprints(state) -> bytes:
    saved = state.fingerprints
    state.fingerprints = {}
    try:
        return state.to_bytes()
    finally:
        state.fingerprints = saved


def worker_tests_log() -> list[bytes]:
    """The worker tests' fleet log, as their larger tests build it."""
    return interleave(every_rule() + mixed_fleet(WORKER_LOG_RUNS))


def side_by_side(logs: dict[str, list[bytes]], repeat: int, secret: bytes | None) -> None:
    """Parse-only, the contract's floor, parse and validate, and replay of each log, timed one
    after the other."""
    print(
        f"{'log':<20}{'events':>10}{'bytes/event':>12}{'parse only/s':>13}{'replay/s':>10}"
        f"{'replay/parse':>13}{'floor/parse':>12}{'validated/parse':>16}"
    )
    for name, lines in logs.items():
        full_replay(lines[:1000])  # warm the caches of the first runs' paths
        parse_s = best_of(repeat, lambda: parse_only(lines))  # noqa: B023 (called at once)
        floor_s = best_of(repeat, lambda: contract_floor(lines))  # noqa: B023
        validated_s = best_of(repeat, lambda: validated_parse(lines))  # noqa: B023
        replay_s = best_of(repeat, lambda: full_replay(lines, secret))  # noqa: B023
        size = sum(map(len, lines)) / len(lines)
        print(
            f"{name:<20}{len(lines):>10,}{size:>12.0f}{len(lines) / parse_s:>13,.0f}"
            f"{len(lines) / replay_s:>10,.0f}{replay_s / parse_s:>12.2f}x"
            f"{floor_s / parse_s:>11.2f}x{validated_s / parse_s:>15.2f}x"
        )
    print(
        f"target: replay at most 3x parse-only{' (keyed digests)' if secret else ''}; "
        "floor: parse and the digests and encodings contract v1 asks, in C calls alone "
        "(contract_floor); validated: parse and validate"
    )


def jobs_side_by_side(log: Path, repeat: int, keyed: bool, jobs: int = 2) -> None:
    """The command `stallwatch replay` of the log file in one process and with `--jobs`, each the
    best of `repeat` runs taken in turns: wall time, and CPU time of all its processes."""
    timings: dict[int, list[tuple[float, float]]] = {1: [], jobs: []}
    env = {**os.environ, "STALLWATCH_FINGERPRINT_KEY": BENCH_KEY} if keyed else None
    for _ in range(repeat):
        for count in timings:
            before, wall = os.times(), time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "stallwatch.cli.main", "replay", "--jobs", str(count), str(log)],
                stdout=subprocess.DEVNULL,
                env=env,
                check=True,
            )
            after = os.times()
            cpu = after.children_user - before.children_user + after.children_system - before.children_system
            timings[count].append((time.perf_counter() - wall, cpu))
    (one_wall, one_cpu), (many_wall, many_cpu) = min(timings[1]), min(timings[jobs])
    print(
        f"stallwatch replay of the fleet log file: 1 process {one_wall:.1f} s (CPU {one_cpu:.1f} s), "
        f"--jobs {jobs} {many_wall:.1f} s (CPU {many_cpu:.1f} s): {one_wall / many_wall:.2f}x as "
        f"fast on {os.cpu_count()} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", default=str(HERE / "data" / "fleet.jsonl"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--keyed", action="store_true", help="key every digest, as STALLWATCH_FINGERPRINT_KEY does"
    )
    args = parser.parse_args()
    secret = derive_secret(BENCH_KEY) if args.keyed else None
    log = Path(args.log)
    if not log.exists():
        subprocess.run([sys.executable, str(HERE / "fleet_log.py"), "--out", str(log)], check=True)
    lines = log.read_bytes().splitlines()
    logs = {"fleet log": lines, "worker tests' log": worker_tests_log()}
    commands, rejected = full_replay(lines, secret)
    print(f"fleet log: {log} - {len(lines):,} events, commands {commands:,}, dead letters {rejected:,}")
    side_by_side(logs, args.repeat, secret)
    jobs_side_by_side(log, min(args.repeat, 2), args.keyed)
    state_sizes(lines[: len(lines) // 3])


if __name__ == "__main__":
    main()
