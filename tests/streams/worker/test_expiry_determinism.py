"""Expiry as a function of the partition's log: the same log cut into batches of any size, scanned
at any time, restored between any two batches, gives the same commands byte for byte (what
publishing a command ahead of its batch's transaction rests on)."""

from __future__ import annotations

import itertools

import orjson
import pytest

from stallwatch.engine.detector import Detector
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.expiry import ExpiryScan
from stallwatch_streams.worker.store import PartitionStates, decode_position, encode_position
from stallwatch_streams.worker.task import PartitionTask
from tests.script import RunScript
from tests.streams.worker.fake_tasks import FakePartition

IDLE_S, ENDED_S = 3600.0, 600.0
T0_MS = 1_800_000_000_000


def partition_log() -> list[SourceMessage]:
    """Runs whose next event comes after their state expired on the broker's clock, beside a busy
    one that moves the clock: a looping run (refused while its state lives, allowed as unknown
    once gone), an ended run called again, and a broker clock that steps back once."""
    loop, ended, busy = RunScript("loop"), RunScript("ended"), RunScript("busy")
    loop.start_round()
    for _ in range(4):
        loop.call("search", {"q": 1}, status="ok", result="same")
    ended.start_round()
    ended.call("search", {"q": 1}, status="ok", result="r")
    ended.end()
    busy.start_round()
    timed: list[tuple[RunScript, dict, float]] = []  # (script, event, append time in s)
    timed += [(loop, e, 0.0) for e in loop.events] + [(ended, e, 1.0) for e in ended.events]
    timed += [(busy, e, 2.0) for e in busy.events]
    # The busy run's calls over more than the idle timeout, then one more repeat of the loop
    # (its state expired by then), a call of the ended run and the ended run started again.
    for step in range(1, 9):
        n = len(busy.events)
        busy.call("search", {"q": step}, status="ok", result=f"r{step}")
        timed += [(busy, e, step * IDLE_S / 6) for e in busy.events[n:]]
        if step == 4:
            n = len(ended.events)
            ended.call("search", {"q": 1})
            timed += [(ended, e, step * IDLE_S / 6) for e in ended.events[n:]]
    late = 8 * IDLE_S / 6
    for script in (loop, ended):
        n = len(script.events)
        script.call("search", {"q": 1})
        # The broker's clock stepped back (a new leader's): the partition clock does not.
        timed += [(script, e, late - IDLE_S / 2) for e in script.events[n:]]
    again = RunScript("ended", ts=ended.ts)
    again.events[0]["event_id"] = "ended/again"
    timed.append((again, again.events[0], late + 1))
    return [
        SourceMessage(
            script.run_id.encode(), orjson.dumps(event), 0, offset, timestamp=T0_MS + int(seconds * 1000)
        )
        for offset, (script, event, seconds) in enumerate(timed)
    ]


class Partition:
    """Partition 0 of a worker: its task (scanned every `scan_interval_s`) over fakes, and what
    Kafka committed."""

    def __init__(self, scan_interval_s: float) -> None:
        self.scan_interval_s = scan_interval_s
        self.fake = FakePartition(
            BatchApplier(Detector(), "events", idle_timeout_s=IDLE_S, ended_retention_s=ENDED_S)
        )
        self.committed = self.fake.committed
        self.task = self.fake.task

    async def serve(self) -> Partition:
        await self.fake.serve()
        self._scan()
        return self

    def _scan(self) -> None:
        self.task.expiry = ExpiryScan(0, IDLE_S, ENDED_S, self.scan_interval_s)

    async def commit(self, records: list[SourceMessage]) -> bool:
        committer = self.fake.committer
        return await committer.commit(self.task, [await committer.apply(self.task, records)])

    async def restore(self) -> None:
        """What a successor starts from: a task of its own, with the committed states, position
        and clock."""
        self.task = self.fake.task = PartitionTask(self.task.tp, self.fake.context)
        await self.serve()


async def commands_of(log: list[SourceMessage], size: int, scan: bool, restore: bool) -> list[bytes]:
    p = await Partition(0.0 if scan else float("inf")).serve()
    for start in range(0, len(log), size):
        assert await p.commit(log[start : start + size])
        if restore:
            await p.restore()
    return [value for _, value in p.committed.records("commands") if value is not None]


@pytest.mark.parametrize(
    ("size", "scan", "restore"), list(itertools.product([1, 2, 5, 7], [False, True], [False, True]))
)
async def test_the_commands_are_the_same_however_the_log_is_cut_scanned_and_restored(
    size: int, scan: bool, restore: bool
) -> None:
    log = partition_log()
    whole = await commands_of(log, len(log), scan=False, restore=False)
    assert await commands_of(log, size, scan, restore) == whole


async def test_a_run_expired_by_the_time_of_its_record_is_met_as_absent() -> None:
    log = partition_log()
    decisions = [
        (c["run_id"], c.get("decision"), c.get("reason_code"))
        for c in map(orjson.loads, await commands_of(log, len(log), False, False))
    ]
    loop = [d for run, d, _ in decisions if run == "loop"]
    # Refused while its state lived; its last repeat came after the idle timeout: unknown, allowed.
    assert "refuse" in loop and loop[-1] == "allow"
    ended = [d for run, d, _ in decisions if run == "ended"]
    assert ended[-1] == "allow"


def test_the_position_carries_the_clock_and_the_format_before_still_reads() -> None:
    assert decode_position(encode_position(42, 1_800_000_123.456789)) == (42, 1_800_000_123.456789)
    assert decode_position(b"42") == (42, None)
    states = PartitionStates({}, 42, 1_800_000_123.5)
    assert states.position == 42 and states.clock.newest == 1_800_000_123.5


@pytest.mark.parametrize("size", [1, 3, 100])
async def test_a_run_started_again_in_an_expired_runs_place_keeps_its_new_state(size: int) -> None:
    old = RunScript("again")
    old.round_of(("search", {"q": 1}, {"docs": [1]}))
    new = RunScript("again", ts=old.ts)
    for event in new.events:
        event["event_id"] = "new/" + event["event_id"]
    new.round_of(("search", {"q": 2}, {"docs": [2]}))
    new.start_round()
    new.call("search", {"q": 2})  # a repeat of the new run's own call: refused while it lives
    timed = [(e, 0.0) for e in old.events] + [(e, IDLE_S + 10) for e in new.events]
    log = [
        SourceMessage(b"again", orjson.dumps(e), 0, offset, timestamp=T0_MS + int(s * 1000))
        for offset, (e, s) in enumerate(timed)
    ]
    p = await Partition(0.0).serve()  # a scan at every batch
    for start in range(0, len(log), size):
        assert await p.commit(log[start : start + size])
    verdicts = [orjson.loads(v) for _, v in p.committed.records("commands") if v is not None]
    assert verdicts[-1]["decision"] == "refuse"
    assert p.task.states.load("again") is not None
