"""A broker of three fails under load: the longest gap in each partition's output, the decision
workers beside a bare aiokafka transactional echo on the same cluster, under the same fault.

    python benchmarks/cluster_bench.py [--fault kill|freeze|kill-worker|rolling] [--rate 700]
                                       [--down-s 25]

The cluster is deploy/kafka/cluster.sh (three KRaft nodes, replication 3, min ISR 2;
tests/cluster_harness.py drives it). Two workers on eight partitions and two members of a bare
transactional echo (benchmarks/txn_echo.py: the events copied to a topic of its own, each batch in
one transaction with its offsets) run under a steady load of short runs, each partition's load
sent on its own so that a partition whose leader is away holds up no other. After 15 s, a fault:

  kill         the node leading the most events partitions is killed (SIGKILL), started again
               `--down-s` later;
  freeze       that node is frozen (SIGSTOP) for `--down-s`, then thawed;
  kill-worker  that node and one worker (and one echo member) are killed together; the node is
               started again `--down-s` later, the worker is not (its partitions move);
  rolling      each node in turn shut down cleanly and started again, the next once the cluster
               is whole (every replica back in sync).

The load goes on 20 s after the fault ends. Printed per partition: the longest time between two
consecutive records of the events (the load itself), of the workers' commands and of the echo's
output during the fault, as a reader on the cluster receives them; and whether every run's
commands equal a crash-free replay of the events as the broker holds them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

from aiokafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.kafka.options import failover_options
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from tests import cluster_harness as nodes
from tests.kafka_harness import WorkerProcess, by_run, replay_commands, stored_events
from tests.steady_load import arrivals, load, longest_gaps

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 8
FAULTS = ("kill", "freeze", "kill-worker", "rolling")
# Seconds of load before the fault, and after it ends.
LEAD_S, TAIL_S = 15.0, 20.0


class EchoMember:
    """One member of the bare echo's group, as a process of its own (so it can be killed)."""

    def __init__(self, settings: Settings, output: str, name: str) -> None:
        log = Path(f"/tmp/stallwatch-{settings.topic_prefix}-echo-{name}.log")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "benchmarks/txn_echo.py"),
                settings.bootstrap,
                settings.events_topic,
                output,
                f"{settings.topic_prefix}-echo",
                *(f"--opt={k}={v}" for k, v in failover_options(settings).items()),
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


async def cluster_topics(prefix: str) -> tuple[Settings, str]:
    """The cluster up, a fresh set of the project's topics on it and the echo's output topic
    (replicated as the workers' are): the settings and the echo topic's name."""
    await asyncio.to_thread(nodes.up)
    settings = Settings(
        bootstrap=nodes.bootstrap(), topic_prefix=f"{prefix}{uuid.uuid4().hex[:8]}", partitions=PARTITIONS
    )
    await ensure_topics(settings)
    echo_topic = f"{settings.topic_prefix}.echo"
    await ensure_topics(
        settings, only=[NewTopic(echo_topic, PARTITIONS, 3, topic_configs={"min.insync.replicas": "2"})]
    )
    return settings, echo_topic


async def fault(
    kind: str, settings: Settings, workers: list[WorkerProcess], echoes: list[EchoMember], down_s: float
) -> tuple[float, str]:
    """The fault, from its first act to the cluster's return: (when it began, what was done)."""
    node = await nodes.leader_of_most(settings.events_topic)
    if kind == "rolling":
        began = time.monotonic()
        for n in nodes.NODES:
            await asyncio.to_thread(nodes.stop, n)
            await asyncio.to_thread(nodes.start, n)
            await nodes.until_whole()
        return began, "a clean restart of nodes 1, 2, 3 in turn, each after the cluster was whole"
    if kind == "freeze":
        began = nodes.freeze(node)
        await asyncio.sleep(down_s)
        nodes.thaw(node)
        return began, f"node {node} (leading the most events partitions) frozen {down_s:.0f} s"
    began = nodes.kill(node)
    what = f"node {node} (leading the most events partitions) killed, started {down_s:.0f} s later"
    if kind == "kill-worker":
        workers[0].kill()
        echoes[0].kill()
        what += ", with one worker and one echo member"
    await asyncio.sleep(down_s - (time.monotonic() - began))
    await asyncio.to_thread(nodes.start, node)
    return began, what


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=FAULTS, default="kill")
    parser.add_argument("--rate", type=float, default=700.0, help="events per second")
    parser.add_argument("--down-s", type=float, default=25.0)
    args = parser.parse_args()
    settings, echo_topic = await cluster_topics("c")
    env = {"STALLWATCH_REPLICATION_FACTOR": "3", "STALLWATCH_MIN_INSYNC_REPLICAS": "2"}
    workers = [WorkerProcess(settings, name, env) for name in ("a", "b")]
    echoes = [EchoMember(settings, echo_topic, name) for name in ("a", "b")]
    stop, load_stop = asyncio.Event(), asyncio.Event()
    events: dict[int, list[float]] = defaultdict(list)
    commands: dict[int, list[float]] = defaultdict(list)
    echoed: dict[int, list[float]] = defaultdict(list)
    command_values: list[bytes] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for worker in workers:
            await worker.ready(120)
        tasks = [
            asyncio.create_task(arrivals(settings, settings.events_topic, stop, events, [])),
            asyncio.create_task(arrivals(settings, settings.commands_topic, stop, commands, command_values)),
            asyncio.create_task(arrivals(settings, echo_topic, stop, echoed, [])),
        ]
        loading = asyncio.create_task(load(settings, args.rate, load_stop))
        await asyncio.sleep(LEAD_S)
        began, what = await fault(args.fault, settings, workers, echoes, args.down_s)
        ended = time.monotonic()
        await asyncio.sleep(TAIL_S)
        load_stop.set()
        await loading
        await asyncio.sleep(10)  # the last events' commands
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
        for worker in workers:
            worker.stop()
        for member in echoes:
            member.stop()
    end = ended + TAIL_S
    gaps = {
        name: longest_gaps(times, PARTITIONS, began, end)
        for name, times in (("events", events), ("workers", commands), ("echo", echoed))
    }
    print(
        f"fault: {what}; {args.rate:.0f} events/s; the longest gap per partition, in seconds "
        f"(from the fault's start until {TAIL_S:.0f} s after its end, {end - began:.0f} s)"
    )
    print("partition  events  workers    echo")
    for partition in range(PARTITIONS):
        print(
            f"{partition:9}  {gaps['events'][partition]:6.1f}  {gaps['workers'][partition]:7.1f}  "
            f"{gaps['echo'][partition]:6.1f}"
        )
    worst = {name: max(g.values()) for name, g in gaps.items()}
    print(
        f"{'max':>9}  {worst['events']:6.1f}  {worst['workers']:7.1f}  {worst['echo']:6.1f}"
        f"   workers/echo {worst['workers'] / worst['echo']:.2f}"
    )
    # The log as the broker holds it: a send that timed out during the fault never reached it.
    expected = by_run(replay_commands(await stored_events(settings)))
    got = by_run(command_values)
    differing = [run for run in expected if got.get(run) != expected[run]]
    print(f"exact: {len(expected) - len(differing)} of {len(expected)} runs equal replay")


if __name__ == "__main__":
    asyncio.run(main())
