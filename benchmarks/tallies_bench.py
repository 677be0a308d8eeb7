"""The worker's batch step with and without the fleet tallies: cost per event, and the ratio.

    python benchmarks/tallies_bench.py [--runs 2000] [--batch 500] [--repeat 5]

The synthetic fleet log of benchmarks/fleet_log.py (results with content, as the Kafka
benchmark sends them), cut into batches of one partition, applied by `BatchApplier` in process
(no broker): the pure step only, CPU time, best of `--repeat` interleaved passes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fleet_log import fleet_events
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.tallies import Tallies


def one_pass(messages: list[SourceMessage], batch: int, tallies: bool) -> float:
    """Seconds to apply every batch, states kept between batches as the store keeps them."""
    detector = Detector()
    applier = BatchApplier(detector, "events", tallies=Tallies() if tallies else None)
    states: dict[str, RunState] = {}
    clock = PartitionClock()
    started = time.process_time()  # CPU time: less at the mercy of other processes on the machine
    for i in range(0, len(messages), batch):
        result = applier.apply(messages[i : i + batch], states.get, clock, 0.0)
        states.update(result.states)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    messages = [
        SourceMessage(e["run_id"].encode(), orjson.dumps(e), 0, i)
        for i, e in enumerate(fleet_events(args.runs))
    ]
    passes: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeat):  # interleaved, so a busy spell of the machine hits both alike
        for flag in (False, True):
            passes[flag].append(one_pass(messages, args.batch, flag))
    best = {flag: min(times) for flag, times in passes.items()}
    per_event = {flag: best[flag] / len(messages) * 1e6 for flag in best}
    print(f"batch step, {len(messages):,} events in batches of {args.batch}, best of {args.repeat}:")
    print(f"  without tallies  {per_event[False]:6.2f} µs/event")
    print(f"  with tallies     {per_event[True]:6.2f} µs/event")
    print(f"  ratio            {per_event[True] / per_event[False]:6.2f}")


if __name__ == "__main__":
    main()
