"""Where a broker's failure costs time: a timeline of one fault on the three-node cluster.

    python benchmarks/failover_probe.py [--fault kill|freeze] [--down-s 25] [--opt key=value ...]

A bare aiokafka transactional echo (benchmarks/txn_echo.py) under benchmarks/cluster_bench.py's
steady load, with the echo's client options given by --opt (e.g. request_timeout_ms=40000; the
load and the reader use the project's, stallwatch/kafka/options.py). The node leading the most events
partitions is killed or frozen. Printed, in seconds after the fault: the cluster's leader and ISR
changes of the events topic and of Kafka's internal topics (as the live nodes tell them), the
clients' warnings, and per partition when the echo's output stopped and flowed again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cluster_bench import PARTITIONS, cluster_topics
from benchmarks.txn_echo import echo, parse_options
from tests import cluster_harness as nodes
from tests.steady_load import arrivals, load

FAULT_AT: list[float] = []


def since_fault() -> str:
    return f"{time.monotonic() - FAULT_AT[0]:+7.2f}s" if FAULT_AT else "  before"


class Relative(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{since_fault()} {record.name}: {record.getMessage()}"[:240]


async def watch_leaders(bootstrap: str, topics: list[str], stop: asyncio.Event) -> None:
    """Leader and ISR of every partition of `topics`, printed when they change."""
    seen: dict[tuple[str, int], tuple[int, list[int]]] = {}
    while not stop.is_set():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            await admin.start()
            while not stop.is_set():
                for described in await admin.describe_topics(topics):
                    for p in described["partitions"]:
                        key = (described["topic"].split(".")[-1], p["partition"])
                        now = (p["leader"], sorted(p["isr"]))
                        if seen.get(key) != now:
                            if key in seen:
                                print(f"{since_fault()} {key[0]}-{key[1]}: leader {now[0]} isr {now[1]}")
                            seen[key] = now
                await asyncio.sleep(0.25)
        except Exception as exc:  # a probe: it says so and goes on
            print(f"{since_fault()} watcher: {exc!r}")
            await asyncio.sleep(0.5)
        finally:
            with contextlib.suppress(Exception):
                await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=["kill", "freeze"], default="freeze")
    parser.add_argument("--rate", type=float, default=700.0)
    parser.add_argument("--down-s", type=float, default=25.0)
    parser.add_argument("--opt", action="append", default=[], help="client option key=value")
    args = parser.parse_args()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(Relative())
    logging.getLogger("aiokafka").addHandler(handler)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    options = parse_options(args.opt)
    settings, echo_topic = await cluster_topics("p")
    stop = asyncio.Event()
    echoed: dict[int, list[float]] = defaultdict(list)
    tasks = [
        asyncio.create_task(
            echo(
                settings.bootstrap,
                settings.events_topic,
                echo_topic,
                f"{settings.topic_prefix}-echo",
                stop,
                options,
            )
        ),
        asyncio.create_task(arrivals(settings, echo_topic, stop, echoed, [])),
    ]
    node = await nodes.leader_of_most(settings.events_topic)
    watched = [settings.events_topic, echo_topic, "__consumer_offsets", "__transaction_state"]
    tasks.append(asyncio.create_task(watch_leaders(nodes.bootstrap(without=node), watched, stop)))
    load_stop = asyncio.Event()
    loading = asyncio.create_task(load(settings, args.rate, load_stop))
    try:
        await asyncio.sleep(10)
        FAULT_AT.append(nodes.kill(node) if args.fault == "kill" else nodes.freeze(node))
        print(f"{since_fault()} node {node} {args.fault}")
        await asyncio.sleep(args.down_s)
        print(f"{since_fault()} node {node} back")
        if args.fault == "kill":
            await asyncio.to_thread(nodes.start, node)
        else:
            nodes.thaw(node)
        print(f"{since_fault()} node {node} answering")
        await asyncio.sleep(25)
    finally:
        load_stop.set()
        with contextlib.suppress(Exception):
            await loading
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
        with contextlib.suppress(Exception):
            nodes.thaw(node)
    fault = FAULT_AT[0]
    end = fault + args.down_s + 20
    print("partition  longest gap: from  to (s after the fault)")
    for partition in range(PARTITIONS):
        seen = sorted(t for t in echoed.get(partition, []) if fault <= t <= end)
        points = [fault, *seen, end]
        a, b = max(itertools.pairwise(points), key=lambda pair: pair[1] - pair[0])
        print(f"{partition:9}  {b - a:11.2f}  {a - fault:5.2f}  {b - fault:5.2f}")


if __name__ == "__main__":
    asyncio.run(main())
