"""The cut-off scenarios ten times each on the local broker; prints each pass and exits non-zero
if any pass fails.

    python benchmarks/cutoff_loop.py [--passes 10] [--variant takeover|heal-before-expiry|both] [--drop]

Each pass: two workers on eight partitions under a steady 800 events/s, worker A reaching the
broker only through a proxy that cuts it off (tests/kafka_harness.py `CuttableLink`). `takeover`:
the cut holds A's commit until B serves every partition, then heals; A must live and rejoin.
`heal-before-expiry`: the cut holds a transactional write and heals before A's session expires;
A must carry on, without a rebalance. Every run's commands (the first copy of each command id) are
compared with replay, and no command id may carry two different contents (one published again with
the same bytes is counted, not a failure). `--drop` resets A's connections at the cut
instead of holding them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.logs import configure as configure_logging
from tests.kafka_harness import kafka
from tests.streams.worker.faults import CutOutcome, cut_off


def verdict(outcome: CutOutcome, heal_before_expiry: bool) -> list[str]:
    """What the pass got wrong: the same promises as tests/streams/worker/test_faults.py."""
    wrong = [] if outcome.exact else [outcome.summary()]
    if heal_before_expiry:
        if outcome.taken_over:
            wrong.append("B took partitions over although A healed before its session expired")
        if outcome.zombie_exit is not None or outcome.zombie_fenced:
            wrong.append(f"A did not carry on (exit {outcome.zombie_exit}, fenced {outcome.zombie_fenced})")
    else:
        if not outcome.taken_over:
            wrong.append("B never took A's partitions over")
        if outcome.zombie_exit is not None or not outcome.zombie_rejoined:
            wrong.append(
                f"A did not rejoin (exit {outcome.zombie_exit}, served again {outcome.zombie_rejoined})"
            )
    return wrong


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--variant", choices=["takeover", "heal-before-expiry", "both"], default="both")
    parser.add_argument("--drop", action="store_true")
    args = parser.parse_args()
    variants = {"takeover": [False], "heal-before-expiry": [True], "both": [False, True]}[args.variant]
    kafka("up")
    failed = 0
    for heal_before_expiry in variants:
        name = "heal-before-expiry" if heal_before_expiry else "takeover"
        passed = 0
        for n in range(1, args.passes + 1):
            outcome = await cut_off(heal_before_expiry, drop=args.drop)
            wrong = verdict(outcome, heal_before_expiry)
            passed += not wrong
            print(
                f"{name}{' (drop)' if args.drop else ''} pass {n:2}/{args.passes}: {outcome.runs} "
                f"runs, cut {outcome.cut_s:.1f} s, B took over: {outcome.taken_over}, A exit "
                f"{outcome.zombie_exit}, fenced: {outcome.zombie_fenced}, served again: "
                f"{outcome.zombie_rejoined}; "
                f"{'ok' if not wrong else 'FAILED: ' + '; '.join(wrong)} ({outcome.seconds:.0f} s)",
                flush=True,
            )
            if wrong:
                print(outcome.zombie_log, flush=True)
        print(f"{name}: {passed} of {args.passes} passes", flush=True)
        failed += args.passes - passed
    return 1 if failed else 0


if __name__ == "__main__":
    configure_logging("WARNING")  # the passes on stdout; aiokafka's retried start-up noise folded
    sys.exit(asyncio.run(main()))
