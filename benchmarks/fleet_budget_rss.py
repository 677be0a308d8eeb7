"""The fleet app's resident memory against its keys' estimate, on a real broker: one tenant floods
(tenant, tool) keys at every cap until its budget refuses them.

    python benchmarks/fleet_budget_rss.py [--budget-mib 64] [--tools 80] [--buckets 6]

A fleet app (`stallwatch fleet`, a process of its own) with STALLWATCH_FLEET_MAX_BYTES_PER_TENANT
set to `--budget-mib`; `--tools` made-up tools of one tenant, each sent `--buckets` tallies at
every cap (64 runs and stops of 128-character ids, 16 answers of 16 runs and 16 digests). Prints
the app's resident memory idle and after, its estimate (`stallwatch_fleet_state_bytes`), and the
keys refused (`memory_quota`): what the estimate says of the process's own growth, the
allocator's slack and the changelog's writes included.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.kafka_harness import fresh_settings
from tests.streams.fleet.harness import FleetProcess, Tallies
from tests.streams.fleet.test_bounds import at_caps


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-mib", type=int, default=64)
    parser.add_argument("--tools", type=int, default=80)
    parser.add_argument("--buckets", type=int, default=6)
    parser.add_argument("--settle-s", type=float, default=30.0)
    args = parser.parse_args()
    settings = fresh_settings(partitions=1)
    budget = args.budget_mib << 20
    fleet = FleetProcess(settings, env={"STALLWATCH_FLEET_MAX_BYTES_PER_TENANT": str(budget)})
    now = float(int(time.time()))
    tools = [f"made-up-{k}" for k in range(args.tools)]
    try:
        await fleet.serving()
        await asyncio.sleep(3.0)  # the app settles after its join
        idle = fleet.rss()
        async with Tallies(settings) as tallies:
            for step in range(args.buckets):
                await tallies.send([at_caps(tool, now + step, "flooder") for tool in tools])
        sent = args.tools * args.buckets
        deadline = time.monotonic() + 600
        while fleet.metric("stallwatch_fleet_partials_total") < sent and time.monotonic() < deadline:
            await asyncio.sleep(2.0)
        estimate = fleet.metric('stallwatch_fleet_state_bytes{tenant="flooder"}')
        refused = fleet.metric('stallwatch_fleet_tenant_quota_total{outcome="memory_quota",tenant="flooder"}')
        after = fleet.rss()
        await asyncio.sleep(args.settle_s)  # what the process keeps once its buffers are spent
        settled = fleet.rss()
        print(f"partials judged {fleet.metric('stallwatch_fleet_partials_total'):,.0f} of {sent:,}")
        print(
            f"keys held {fleet.metric('stallwatch_fleet_tracked_keys'):,.0f}, new keys refused {refused:,.0f}"
        )
        print(f"budget {budget / 2**20:,.1f} MiB, estimate {estimate / 2**20:,.1f} MiB")
        print(
            f"resident: idle {idle / 2**20:,.1f} MiB, after {after / 2**20:,.1f} MiB, "
            f"grown {(after - idle) / 2**20:,.1f} MiB = {(after - idle) / max(estimate, 1):.2f}x the estimate"
        )
        print(
            f"resident {args.settle_s:.0f} s later: {settled / 2**20:,.1f} MiB, grown "
            f"{(settled - idle) / max(estimate, 1):.2f}x the estimate"
        )
    finally:
        fleet.stop()


if __name__ == "__main__":
    asyncio.run(main())
