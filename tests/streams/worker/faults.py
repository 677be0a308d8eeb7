"""A hostile operator's scenarios on a real broker, every run's commands compared with a crash-free
replay: SIGKILLs under steady load (one while the group rebalances), and a worker cut off from the
broker by a network partition, then healed.

Shared by the tests (one pass each) and `benchmarks/kill_loop.py`, `benchmarks/cutoff_loop.py`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson

from tests.kafka_harness import (
    END_TXN,
    PRODUCE,
    SETTLE_S,
    CuttableLink,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.worker.fleet_logs import interleave, mixed_fleet
from tests.waiting import until

# The two transaction models (docs/tenants.md), as every worker's environment.
MODELS = {"partition": {}, "group": {"STALLWATCH_TRANSACTION_MODEL": "group"}}
# What a cut-off worker's log says of its late commit's refusal, by model: a successor's producer
# fenced it (partition), or its transaction was aborted for its age or refused for its stale
# generation (group).
REFUSALS = {"partition": ("ProducerFenced",), "group": ("and was fenced", "the batch's transaction failed")}

# A steady 800 events/s: 80 events, then a pause of 0.1 s.
STEADY_EVERY, STEADY_PAUSE_S = 80, 0.1
# The workers' group session (stallwatch_streams/worker/membership.py): a member silent this long
# is removed.
SESSION_S = 6.0
# How long a cut-off worker's partitions may take to move to the other, by model: the group
# model's session is longer (stallwatch_streams/worker/confluent/consumer.py), and its successor
# then waits for the cut-off worker's open transaction to be aborted for its age.
TAKEOVER_S = {"partition": 30.0, "group": 60.0}
# A cut meant to end before the session expires ends this long before it would: room for the
# heartbeat held by the cut to reach the broker on a loaded machine.
HEAL_MARGIN_S = 1.5


@dataclass
class Outcome:
    """What a scenario saw: the runs whose commands (the first copy of each command id) differ
    from replay, any command id published with two different contents (there must be none), and
    the ids published more than once with the same bytes (harmless: a command published ahead of
    its batch's transaction is published again by whoever reads the batch again, and readers keep
    the first copy of an id)."""

    runs: int
    differing: list[str] = field(default_factory=list)
    conflicting: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Events the last workers read again and skipped (at or below a run's last applied offset):
    # none when every partition resumed at the position its last commit wrote.
    skipped: float = 0.0

    @property
    def exact(self) -> bool:
        return not self.differing and not self.conflicting

    def summary(self) -> str:
        return (
            f"{len(self.differing)} of {self.runs} runs differ from replay (e.g. "
            f"{self.differing[:3]}), {len(self.conflicting)} command ids with two different "
            f"contents (e.g. {self.conflicting[:3]}); {len(self.doubled)} ids published "
            f"again with the same bytes"
        )


async def _rebalancing(worker: WorkerProcess, since: int, timeout_s: float) -> None:
    """Until the worker's log shows a rebalance beyond the first `since` ones."""
    await until(
        lambda: worker.log_path.read_text(errors="replace").count("rebalance: revoking partitions") > since,
        timeout_s,
        lambda: f"a rebalance beyond the first {since}:\n{worker.log_tail()}",
        interval_s=0.02,
    )


async def three_kills(
    partitions: int = 8,
    runs: int = 480,
    env: dict[str, str] | None = None,
    pause_s: float = STEADY_PAUSE_S,
    rebalance_s: float = 30.0,
    survivor_revokes: bool = True,
) -> Outcome:
    """Two workers; SIGKILL one and restart it; SIGKILL the other while the group rebalances
    for the restarted one; later SIGKILL again; all under a steady load (`pause_s` after every
    STEADY_EVERY events). `env`: every worker's. `rebalance_s`: how long the rebalance for the
    restarted worker may take to show. It shows as the survivor's revocation (an eager
    rebalance revokes every partition), or, with `survivor_revokes=False` (cooperative-sticky:
    the dead worker's partitions go to the restarted one and the survivor keeps its own), as the
    restarted worker's first assignment."""
    settings = fresh_settings(partitions)
    log = interleave(mixed_fleet(runs))
    expected = by_run(replay_commands(log))
    a = WorkerProcess(settings, "a", env)
    workers = [a]
    outcome = Outcome(runs=len(expected))
    begin = time.monotonic()
    try:
        await wait_until_serving(settings)
        b = WorkerProcess(settings, "b", env)
        workers.append(b)
        await b.ready()
        producing = asyncio.create_task(produce(settings, log, pause_every=STEADY_EVERY, pause_s=pause_s))
        # Under load: both workers have committed batches of the log (beside the probe's).
        for worker in (a, b):
            await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= 2)
        a.kill()
        outcome.kills.append("a, under load")
        revokes = b.log_path.read_text(errors="replace").count("rebalance: revoking partitions")
        a = WorkerProcess(settings, "a2", env)
        workers.append(a)
        if survivor_revokes:
            await _rebalancing(b, revokes, timeout_s=rebalance_s)
        else:
            restarted = a
            await until(
                lambda: restarted.assignments(),
                rebalance_s,
                lambda: f"the group rebalanced for a2:\n{restarted.log_tail()}",
                interval_s=0.02,
            )
        b.kill()
        outcome.kills.append("b, while the group rebalanced for a2")
        b = WorkerProcess(settings, "b2", env)
        workers.append(b)
        await b.ready(timeout_s=60)
        # a2 at work beside b2: a batch committed after b2 joined.
        consumed = await asyncio.to_thread(a.metric, "stallwatch_events_consumed_total")
        await a.until_metric("stallwatch_events_consumed_total", lambda n: n > consumed)
        a.kill()
        outcome.kills.append("a2, after b2 joined")
        a = WorkerProcess(settings, "a3", env)
        workers.append(a)
        assert not producing.done(), "the log ended before the third kill: make it longer"
        await producing
        got = await collect(
            settings, settings.commands_topic, sum(map(len, expected.values())), 180, settle_s=SETTLE_S
        )
        outcome.skipped = sum(w.metric("stallwatch_events_skipped_total") for w in (a, b))
    finally:
        for worker in workers:
            worker.stop()
    _compare(outcome, expected, got)
    outcome.seconds = time.monotonic() - begin
    return outcome


def _compare(outcome: Outcome, expected: dict[str, list[bytes]], got: list[bytes]) -> None:
    """No command id with two different contents, and every run's commands (the first copy of each
    id, as readers keep) against replay: every replay command present, nothing else."""
    ids = Counter(orjson.loads(raw)["command_id"] for raw in got)
    outcome.doubled = [command_id for command_id, n in ids.items() if n > 1]
    contents: dict[str, set[bytes]] = {}
    for raw in got:
        contents.setdefault(orjson.loads(raw)["command_id"], set()).add(raw)
    outcome.conflicting = [command_id for command_id, raws in contents.items() if len(raws) > 1]
    if outcome.conflicting:
        outcome.differing = ["(not compared: conflicting ids)"]
        return
    runs_got = by_run(got)
    outcome.differing = [run for run in expected if runs_got.get(run) != expected[run]]


@dataclass
class CutOutcome(Outcome):
    """What a cut-off scenario saw besides the commands: how long the cut lasted, whether the
    other worker took the partitions over meanwhile, and what the cut-off worker did after."""

    cut_s: float = 0.0
    taken_over: bool = False  # B served any of A's partitions after the cut
    zombie_exit: int | None = None  # the cut-off worker's exit status (None: still serving)
    zombie_fenced: bool = False  # its log names the fencing (ProducerFenced)
    zombie_rejoined: bool = False  # it served partitions again after the heal
    zombie_log: str = ""


async def cut_off(
    heal_before_expiry: bool,
    drop: bool = False,
    partitions: int = 8,
    runs: int = 360,
    model: str = "partition",
    pause_s: float = STEADY_PAUSE_S,
) -> CutOutcome:
    """Two workers under a steady load; A reaches the broker only through a `CuttableLink`.

    A is cut off as one of its requests goes to the broker, and healed later, while the load
    goes on. With `heal_before_expiry=False`, the cut holds A's transaction commit (EndTxn) and
    lasts until B serves every partition (A's session expired, B fenced A's producers), then A
    comes back with its old commit. With `heal_before_expiry=True`, the cut holds one of A's
    transactional writes (Produce) mid-transaction and ends just before A's session would expire.
    With `drop`, the cut resets A's connections and loses the request instead of holding it.
    `model`: the workers' transaction model (MODELS); `pause_s`: the load's pace.
    """
    env = MODELS[model]
    settings = fresh_settings(partitions)
    log = interleave(mixed_fleet(runs))
    expected = by_run(replay_commands(log))
    outcome = CutOutcome(runs=len(expected))
    begin = time.monotonic()
    workers: list[WorkerProcess] = []
    async with CuttableLink() as link:
        try:
            a = WorkerProcess(settings, "a", env={**env, "STALLWATCH_BOOTSTRAP": link.bootstrap})
            workers.append(a)
            await wait_until_serving(settings)
            b = WorkerProcess(settings, "b", env)
            workers.append(b)
            await b.ready()
            assert await a.serving(partitions // 2, 30), a.log_tail()  # the group settled
            producing = asyncio.create_task(produce(settings, log, pause_every=STEADY_EVERY, pause_s=pause_s))
            # Under load: both workers have committed batches of the log (beside the probe's).
            for worker in (a, b):
                await worker.until_metric("stallwatch_events_consumed_total", lambda n: n >= 2)
            before = len(b.assignments())
            b_partitions = set(b.assignments()[-1])
            link.cut_at(PRODUCE if heal_before_expiry else END_TXN, drop)
            await asyncio.wait_for(link.cut_seen.wait(), 15)
            cut = time.monotonic()
            if heal_before_expiry:
                heal_at = link.last_heartbeat + SESSION_S - HEAL_MARGIN_S
                # The thing under test: a cut that ends just before the session would expire.
                await asyncio.sleep(max(0.0, heal_at - time.monotonic()))
            else:
                await b.serving(partitions, TAKEOVER_S[model])
            served_before_heal = len(a.assignments())
            link.heal()
            outcome.cut_s = time.monotonic() - cut
            assert not producing.done(), "the log ended before the heal: make it longer"
            await producing
            got = await collect(
                settings, settings.commands_topic, sum(map(len, expected.values())), 120, settle_s=SETTLE_S
            )
            outcome.zombie_exit = a.proc.poll()
            outcome.zombie_rejoined = any(a.assignments()[served_before_heal:])
            outcome.taken_over = any(set(p) - b_partitions for p in b.assignments()[before:])
        finally:
            # Stopped from threads: the link runs on this loop, and a worker leaving the group
            # through it must not wait on a loop blocked in `stop`.
            await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in workers))
    text = a.log_path.read_text(errors="replace")
    outcome.zombie_fenced = any(sign in text for sign in REFUSALS[model])
    outcome.zombie_log = a.log_tail(15)
    _compare(outcome, expected, got)
    outcome.seconds = time.monotonic() - begin
    return outcome
