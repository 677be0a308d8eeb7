"""The fleet app's memory accounting: a key's estimated bytes against the bytes it holds, and what
the accounting costs per partial judged.

    python benchmarks/fleet_key_bytes.py [--keys-at-caps 20] [--typical-keys 2000] [--partials 20000]

(a) bytes: keys made through the judge tasks as the fleet app makes them (a plain dict for the
    table), each partial parsed from JSON as the app reads it; the bytes the keys hold measured
    with tracemalloc (everything the tasks and the table retain, divided by the keys) beside the
    tasks' estimate (`stallwatch_fleet_state_bytes`). Then the same table as a restart restores
    it (every value read back from JSON) and indexed again. Two shapes: a key at every cap (all
    buckets of the window and the late window, 64 runs and stops, 16 answers of 16 runs and 16
    args, every run id 128 characters, fingerprints and argument digests of 32 hex digits as the
    merge step leaves them, three open incidents with 64 runs advised; and the same with every
    digest 128 characters, as they would be without the merge step's bound), and a tool a few runs call
    (uuids, a few runs a bucket, one answer).
(b) cost: `--partials` partials of one run each into held keys, judged by `IncidentTask.apply`
    (with the accounting) and by the same steps without it (the judge, the table write, the
    recency order, the open keys), alternated in rounds; microseconds per partial, best round.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.contract.digests import digest
from stallwatch.contract.limits import MAX_ID_CHARS
from stallwatch_streams.fleet.metrics import FleetMetrics
from stallwatch_streams.fleet.rules import IncidentRules
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from stallwatch_streams.fleet.tasks import IncidentTasks
from stallwatch_streams.fleet.window import (
    ANSWER_IDS_CAP,
    BUCKET_ANSWERS_CAP,
    BUCKET_RUNS_CAP,
    LATE_WINDOWS,
)

PARTITIONS = 1
T0 = 1_800_000_000.0
# Settings under which every window of a key at its caps opens all three kinds (and advises runs).
CFG = FleetSettings(
    failing_runs=5, failing_ratio=0.5, same_answer_runs=5, same_answer_args=5, looping_stops=5
)


def long_id(prefix: str, n: int) -> str:
    return f"{prefix}-{n}-".ljust(MAX_ID_CHARS, "x")


def partial(tool: str, ts: float, **fields: Any) -> bytes:
    """A partial as the merge step sends it (bytes: parsed again by each judge)."""
    return orjson.dumps(
        {
            "v": 1,
            "tenant": "acme",
            "tool": tool,
            "ts": ts,
            "calls": fields.get("calls", 1),
            "failures": fields.get("failures", 0),
            "runs": fields.get("runs", []),
            "stops": fields.get("stops", []),
            "answers": fields.get("answers", []),
            "dropped": 0,
        }
    )


def at_caps(tool: str, step_s: float, buckets: int) -> list[bytes]:
    """Partials that fill every cap of a key's buckets, one bucket at a time; fingerprints and
    argument digests as the merge step leaves them (32 hex digits)."""
    return at_caps_of(tool, step_s, buckets, lambda text: digest(text.encode()).hex())


def at_caps_long(tool: str, step_s: float, buckets: int) -> list[bytes]:
    """The same with fingerprints and argument digests of 128 characters, as they would be
    without the merge step's bound."""
    return at_caps_of(tool, step_s, buckets, lambda text: text)


def at_caps_of(tool: str, step_s: float, buckets: int, as_digest: Callable[[str], str]) -> list[bytes]:
    found = []
    for b in range(buckets):
        ts = T0 + b * step_s
        runs = [long_id(f"{tool}-run-{b}", i) for i in range(BUCKET_RUNS_CAP)]
        stops = [long_id(f"{tool}-stop-{b}", i) for i in range(BUCKET_RUNS_CAP)]
        answers = [
            {
                "fingerprint": as_digest(long_id(f"{tool}-fp-{b}", a)),
                "runs": [long_id(f"{tool}-arun-{b}-{a}", i) for i in range(ANSWER_IDS_CAP)],
                "args": [as_digest(long_id(f"{tool}-arg-{b}-{a}", i)) for i in range(ANSWER_IDS_CAP)],
            }
            for a in range(BUCKET_ANSWERS_CAP)
        ]
        found.append(partial(tool, ts, calls=128, failures=128, runs=runs, stops=stops, answers=answers))
    return found


def typical(tool: str, step_s: float, buckets: int) -> list[bytes]:
    """A tool three runs call every step: uuids, one answer each step."""
    runs = [str(uuid.uuid4()) for _ in range(3)]
    return [
        partial(
            tool,
            T0 + b * step_s,
            calls=3,
            runs=runs,
            answers=[{"fingerprint": uuid.uuid4().hex, "runs": runs, "args": [uuid.uuid4().hex]}],
        )
        for b in range(buckets)
    ]


def new_tasks(table: dict[bytes, Any]) -> IncidentTasks:
    tasks = IncidentTasks(CFG, table, IncidentRules(CFG), FleetMetrics())
    tasks.assigned({0})
    tasks.index(table, {0}, PARTITIONS)
    return tasks


def measure_bytes(shape: Callable[[str, float, int], list[bytes]], keys: int) -> tuple[float, float, float]:
    """(estimated, held live, held restored) bytes per key."""
    width = round(CFG.window_s / CFG.step_s)
    buckets = width * (1 + LATE_WINDOWS) + 1
    made = {f"tool-{k}": shape(f"tool-{k}", CFG.step_s, buckets) for k in range(keys)}
    gc.collect()
    tracemalloc.start()
    table: dict[bytes, Any] = {}
    before = tracemalloc.get_traced_memory()[0]
    tasks = new_tasks(table)
    task = tasks.for_record(0)
    for tool, partials in made.items():
        key = tally_key("acme", tool)
        for raw in partials:
            record = orjson.loads(raw)
            task.apply(key, record, record["ts"])
    gc.collect()
    live = tracemalloc.get_traced_memory()[0] - before
    estimated = tasks.bytes_held()
    stored = {k: orjson.dumps(v) for k, v in table.items()}
    del tasks, task, table
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    restored_table = {k: orjson.loads(v) for k, v in stored.items()}
    restored = new_tasks(restored_table)
    gc.collect()
    held_restored = tracemalloc.get_traced_memory()[0] - before
    estimated_restored = restored.bytes_held()
    tracemalloc.stop()
    assert estimated > 0 and estimated_restored == estimated, (estimated, estimated_restored)
    return estimated / keys, live / keys, held_restored / keys


def without_accounting(task: Any, key: bytes, record: dict[str, Any], clock: float) -> None:
    """IncidentTask.apply's steps for a held key, without the accounting."""
    ctx = task.context
    ctx.metrics.partials.inc()
    state = ctx.table.get(key)
    dropped, late = state["dropped"], state["late"]
    ctx.rules.apply(state, record, clock)
    ctx.metrics.dropped.labels("cap").inc(state["dropped"] - dropped)
    ctx.metrics.dropped.labels("late").inc(state["late"] - late)
    ctx.table[key] = state
    plain.setdefault(key, None)
    plain.move_to_end(key)
    if state["open"]:
        task.open_keys.add(key)
    else:
        task.open_keys.discard(key)
    ctx.open_changed()


plain: OrderedDict[bytes, None] = OrderedDict()


def measure_cost(partials: int, rounds: int = 5) -> tuple[float, float]:
    """(with, without) the accounting: microseconds per partial, best round of each."""
    tools = [f"tool-{k}" for k in range(200)]
    table: dict[bytes, Any] = {}
    tasks = new_tasks(table)
    task = tasks.for_record(0)
    records = []
    for n in range(partials):
        tool = tools[n % len(tools)]
        run = f"run-{n % 50}"
        ts = T0 + (n // len(tools)) * 0.5
        records.append(
            (
                tally_key("acme", tool),
                {
                    "v": 1,
                    "tenant": "acme",
                    "tool": tool,
                    "ts": ts,
                    "calls": 1,
                    "failures": 0,
                    "runs": [run],
                    "stops": [],
                    "answers": [{"fingerprint": f"fp-{n % 7}", "runs": [run], "args": [f"a-{n % 11}"]}],
                    "dropped": 0,
                },
            )
        )
    for key, record in records[: len(tools)]:  # every key held before timing
        task.apply(key, dict(record), record["ts"])
    best_with = best_without = float("inf")
    for _ in range(rounds):
        copies = [(k, dict(r)) for k, r in records]
        start = time.perf_counter()
        for key, record in copies:
            task.apply(key, record, record["ts"])
        best_with = min(best_with, (time.perf_counter() - start) / partials * 1e6)
        copies = [(k, dict(r)) for k, r in records]
        start = time.perf_counter()
        for key, record in copies:
            without_accounting(task, key, record, record["ts"])
        best_without = min(best_without, (time.perf_counter() - start) / partials * 1e6)
    return best_with, best_without


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys-at-caps", type=int, default=20)
    parser.add_argument("--typical-keys", type=int, default=2000)
    parser.add_argument("--partials", type=int, default=20_000)
    args = parser.parse_args()
    print("(a) bytes per key: estimated / held live / held after a restore (tracemalloc)")
    for name, shape, keys in (
        ("at every cap", at_caps, args.keys_at_caps),
        ("the same, long digests", at_caps_long, args.keys_at_caps),
        ("typical (3 runs)", typical, args.typical_keys),
    ):
        estimated, live, restored = measure_bytes(shape, keys)
        print(
            f"  {name:24} {estimated:>11,.0f} / {live:>11,.0f} / {restored:>11,.0f}"
            f"   estimate/live {estimated / live:.2f}, estimate/restored {estimated / restored:.2f}"
        )
    with_, without = measure_cost(args.partials)
    print("(b) per partial into a held key, best of 5 rounds (shared machine: read the ratio)")
    print(f"  with the accounting {with_:.1f} µs, without {without:.1f} µs: +{with_ - without:.1f} µs")


if __name__ == "__main__":
    main()
