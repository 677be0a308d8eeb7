"""The kill scenario twenty times in a row on the local broker; prints each pass and exits non-zero
on the first pass whose commands differ from replay.

    python benchmarks/kill_loop.py [--passes 20]

Each pass: two workers on eight partitions under a steady 800 events/s, three SIGKILLs (one while
the group rebalances for a restarted worker), every run's commands compared with a crash-free
replay (the first copy of each command id, as readers keep), no command id with two different
contents (an id published again with the same bytes is counted, not a failure: a command published
ahead of its batch's transaction is published again by whoever reads the batch again), and no
event read twice by the last workers (each partition resumed at its committed position).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.logs import configure as configure_logging
from tests.kafka_harness import kafka
from tests.streams.worker.faults import three_kills


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    kafka("up")
    for n in range(1, args.passes + 1):
        outcome = await three_kills()
        print(
            f"pass {n:2}/{args.passes}: {outcome.runs} runs, kills: {'; '.join(outcome.kills)}; "
            f"{len(outcome.differing)} runs differ, {len(outcome.conflicting)} ids conflicting, "
            f"{len(outcome.doubled)} ids again with the same bytes, "
            f"{outcome.skipped:.0f} events read twice ({outcome.seconds:.0f} s)",
            flush=True,
        )
        if not outcome.exact or outcome.skipped:
            print(
                f"FAILED: differing {outcome.differing[:5]}, conflicting {outcome.conflicting[:5]}, "
                f"{outcome.skipped:.0f} events read twice"
            )
            return 1
    print(f"{args.passes} passes in a row, every run's commands equal to replay")
    return 0


if __name__ == "__main__":
    configure_logging("WARNING")  # the passes on stdout; aiokafka's retried start-up noise folded
    sys.exit(asyncio.run(main()))
