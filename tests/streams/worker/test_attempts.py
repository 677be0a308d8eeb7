"""What a takeover makes of the record its predecessor left (no broker), the batch step's
treatment of an event that killed the worker applying it, and takeovers' reads of the attempts
shared."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import replace

import orjson
from aiokafka.errors import KafkaConnectionError

from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.settings import Settings
from stallwatch_streams.worker.attempts import Attempt, AttemptLog, takeover
from stallwatch_streams.worker.batch import WORKER_CRASH, BatchApplier
from tests.script import RunScript
from tests.streams.worker.test_batch import messages


def test_a_clean_handover_leaves_nothing_to_apply_carefully():
    assert takeover(None, 10) == Attempt()
    committed = Attempt().over(5, 9)  # the batch committed: the successor starts at 10
    assert takeover(committed, 10) == Attempt()


def test_an_owner_that_died_in_a_batch_makes_its_successor_careful_over_that_batch_alone():
    died = Attempt().over(10, 40)
    after = takeover(died, 10)
    assert after.careful_through == 40 and after.poison == ()
    assert after.careful(40) and not after.careful(41)


def test_a_careful_owner_that_died_on_an_event_makes_it_poison_until_committed():
    careful = takeover(Attempt().over(10, 40), 10).at(17)
    after = takeover(careful, 15)  # it committed 10 to 14 before it died on 17
    assert after.poison == (17,) and after.careful_through == 40
    assert takeover(after.at(30), 17).poison == (17, 30)  # 17 not committed yet: kept
    assert takeover(after.at(30), 31).poison == ()  # both committed


def test_a_record_of_this_very_process_tells_of_no_death():
    """A partition fenced and given back to the process that held it: that process lives, so
    neither the event nor the batch it had in hand killed anything."""
    careful = replace(takeover(Attempt().over(10, 40), 10).at(17), poison=(12,), owner="this")
    after = takeover(careful, 15, owner="this")
    assert after.poison == () and after.careful_through == 40  # 12 committed; 17 no poison
    assert takeover(careful, 11, owner="this").poison == (12,)  # an earlier death's, kept
    assert takeover(careful, 15, owner="another").poison == (17,)
    in_batch = replace(Attempt().over(50, 90), owner="this")
    assert takeover(in_batch, 50, owner="this") == Attempt()


def test_an_idle_record_keeps_the_careful_stretch_and_names_nothing_applied():
    careful = Attempt(40, (17,)).at(20)
    assert careful.busy and Attempt().over(1, 2).busy and not careful.idle.busy
    after = takeover(careful.idle, 18)
    assert after.poison == () and after.careful_through == 40  # 17 committed, 20 not taken


def test_records_of_another_format_or_broken_are_a_first_takeover():
    assert Attempt.decode(b'{"v": 2, "batch": [1, 2]}') is None
    assert Attempt.decode(b"{") is None and Attempt.decode(None) is None
    attempt = Attempt(40, (17,)).at(20)
    assert Attempt.decode(attempt.encode()) == attempt
    # The release before wrote no owner: its records read as another process's.
    earlier = orjson.dumps({"v": 1, "careful_through": 40, "poison": [17], "batch": None, "applying": 20})
    assert Attempt.decode(earlier) == attempt and takeover(attempt, 18, owner="this").poison == (20,)
    assert AttemptLog(Settings(), owner="this").encode(attempt) == replace(attempt, owner="this").encode()


def test_the_poison_event_is_dead_lettered_unread_and_its_run_quarantined():
    script = RunScript("r1")
    script.round_of(("search", {"q": 1}, {"n": 1}))
    script.start_round()
    script.call("search", {"q": 2})  # offset 6: killed the worker applying it
    script.call("search", {"q": 2})  # a repeat, refused were the run still judged
    batch = messages(script)
    applier = BatchApplier(Detector(), "events")
    result = applier.apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    assert result.commands[-1].decision == "refuse"
    result = BatchApplier(Detector(), "events").steps(
        batch, lambda run_id: None, PartitionClock(), 0.0, None, {6}
    )
    poisoned = _drain(result)
    assert [(key, reason) for key, _, reason in poisoned.letters] == [(b"r1", "worker_crash")]
    letter = orjson.loads(poisoned.letters[0][1])
    assert letter["error"] == WORKER_CRASH and letter["offset"] == 6 and letter["raw"] == ""
    assert poisoned.states["r1"].quarantined and poisoned.states["r1"].last_offset == 7
    assert poisoned.commands[-1].decision == "allow"  # quarantined: its calls are allowed


def _drain(steps):
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class TopicStandIn(AttemptLog):
    """The attempts topic as a dict; each read of it waits until the test lets it end."""

    def __init__(self) -> None:
        super().__init__(Settings(topic_prefix="t"))
        self.records: dict[str, Attempt] = {}
        self.reads: list[set[str]] = []
        self.ends = asyncio.Event()

    async def _read_all(self, keys: Collection[str]) -> dict[str, Attempt]:
        self.reads.append(set(keys))
        seen = dict(self.records)  # what the topic holds as the read begins
        await self.ends.wait()
        return {key: seen[key] for key in keys if key in seen}


async def test_takeovers_asked_for_during_a_read_are_read_together_in_the_next_one():
    log = TopicStandIn()
    log.records["a/0"] = Attempt(careful_through=4)
    first = asyncio.create_task(log.read(["a/0"]))
    while not log.reads:
        await asyncio.sleep(0)
    # Written after the first read began: only a read that begins later holds it.
    log.records["b/1"] = Attempt(careful_through=9)
    later = [asyncio.create_task(log.read([key])) for key in ("b/1", "c/0", "a/0")]
    log.ends.set()
    assert await first == {"a/0": Attempt(careful_through=4)}
    assert [await read for read in later] == [
        {"b/1": Attempt(careful_through=9)},
        {},
        {"a/0": Attempt(careful_through=4)},
    ]
    assert log.reads == [{"a/0"}, {"b/1", "c/0", "a/0"}]  # two reads for four takeovers


async def test_a_failed_read_fails_every_takeover_waiting_on_it_and_the_next_one_reads_again():
    log = TopicStandIn()
    failing = [KafkaConnectionError()]

    async def read_all(keys: Collection[str]) -> dict[str, Attempt]:
        log.reads.append(set(keys))
        if failing:
            raise failing.pop()
        return {}

    log._read_all = read_all  # type: ignore[method-assign]  # noqa: SLF001 - the read's stand-in
    results = await asyncio.gather(log.read(["a/0"]), log.read(["b/0"]), return_exceptions=True)
    assert [type(r) for r in results] == [KafkaConnectionError, KafkaConnectionError]
    assert await log.read(["a/0"]) == {}
    assert len(log.reads) == 2
