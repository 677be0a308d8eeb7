"""Replay throughput against orjson parse-only on the same file, and the size of run state.

    python benchmarks/replay_bench.py [--log benchmarks/data/fleet.jsonl]

Generates the fleet log first when it is missing. Prints events/s of a full replay (parse,
validate, detect, encode every command) and of parsing each line with orjson alone, their
ratio, the memory each fingerprint held costs, and a typical run's serialised state.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

from stallwatch.contract.commands import encode_command
from stallwatch.engine.canonical import derive_secret
from stallwatch.engine.fleet import Fleet, Rejected

HERE = Path(__file__).parent


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


def full_replay(lines: list[bytes], secret: bytes | None = None) -> tuple[int, int]:
    commands = rejected = 0
    for result in Fleet(secret=secret).replay(lines):
        if isinstance(result, Rejected):
            rejected += 1
        else:
            for command in result:
                encode_command(command)
                commands += 1
    return commands, rejected


def state_sizes(lines: list[bytes]) -> None:
    """Replay part of the log, then weigh the fingerprints and the states of the live runs."""
    fleet = Fleet()
    for _ in fleet.replay(lines):
        pass
    live = [s for s in fleet.runs.values() if not s.ended and s.mode == "researcher"]
    held = sum(len(s.fingerprints) for s in live)
    memory = sum(sys.getsizeof(s.fingerprints) + sum(map(sys.getsizeof, s.fingerprints))
                 for s in live)
    serialised = sorted(len(s.to_bytes()) for s in live)
    with_fps = [s for s in live if s.fingerprints]
    per_fp_wire = statistics.median(
        (len(s.to_bytes()) - len(_without_fingerprints(s))) / len(s.fingerprints) for s in with_fps)
    print(f"live researcher runs            {len(live):>12,}")
    print(f"fingerprints held               {held:>12,}")
    print(f"memory per fingerprint held     {memory / held:>12.0f} bytes (dict slot + 16-byte digest)")
    print(f"serialised per fingerprint      {per_fp_wire:>12.0f} bytes (in the changelog)")
    print(f"serialised run state, median    {statistics.median(serialised):>12,.0f} bytes "
          f"(p90 {serialised[len(serialised) * 9 // 10]:,}, max {serialised[-1]:,})")


def _without_fingerprints(state) -> bytes:
    saved = state.fingerprints
    state.fingerprints = {}
    try:
        return state.to_bytes()
    finally:
        state.fingerprints = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", default=str(HERE / "data" / "fleet.jsonl"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keyed", action="store_true",
                        help="key every digest, as STALLWATCH_FINGERPRINT_KEY does")
    args = parser.parse_args()
    secret = derive_secret("benchmark fingerprint key") if args.keyed else None
    log = Path(args.log)
    if not log.exists():
        subprocess.run([sys.executable, str(HERE / "fleet_log.py"), "--out", str(log)], check=True)
    lines = log.read_bytes().splitlines()
    size = sum(map(len, lines))
    print(f"log: {log} - {len(lines):,} events, {size / 1e6:.0f} MB, "
          f"mean {size / len(lines):.0f} bytes/event")
    commands, rejected = full_replay(lines[:1000])
    parse_s = best_of(args.repeat, lambda: parse_only(lines))
    replay_s = best_of(args.repeat, lambda: full_replay(lines, secret))
    commands, rejected = full_replay(lines, secret)
    print(f"commands {commands:,}, dead letters {rejected:,}")
    print(f"parse only (orjson.loads)       {len(lines) / parse_s:>12,.0f} events/s")
    print(f"replay (parse+validate+detect)  {len(lines) / replay_s:>12,.0f} events/s"
          f"{' (keyed digests)' if secret else ''}")
    print(f"replay / parse-only time        {replay_s / parse_s:>12.2f} x (target <= 3)")
    state_sizes(lines[: len(lines) // 3])


if __name__ == "__main__":
    main()
