"""The fleet app under faults: SIGKILL mid-window, garbage on its input, two workers sharing."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stallwatch.contract.commands import DeadLetter
from stallwatch.contract.digests import digest, secret_from_key
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import EXIT_TABLE_UNWRITABLE, changelog_topic
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from stallwatch_streams.fleet.tasks import partition_of
from tests.kafka_harness import fresh_settings
from tests.streams.fleet.harness import (
    FleetProcess,
    Reader,
    Tallies,
    fleet_evidence,
    tally,
    until_in_changelog,
)
from tests.waiting import until

pytestmark = pytest.mark.kafka


def _failing(run: int, ts: float, tool: str = "search") -> dict:
    return tally(tool, ts, runs=[f"run-{run}"], calls=3, failures=3)


async def test_sigkill_mid_window_then_restart_opens_the_incident_once_with_the_same_id() -> None:
    settings = fresh_settings()
    fleet = FleetProcess(settings, "a")
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.incidents_topic) as incidents,
            Reader(settings, settings.events_topic) as events,
        ):
            # Three runs fail, the app holds them in its window, then dies without a goodbye.
            await tallies.send([_failing(i, now) for i in range(3)])
            await until_in_changelog(settings, {f"run-{i}" for i in range(3)})
            fleet.kill()
            # Two more runs fail while it is down: the fifth crosses the threshold.
            await tallies.send([_failing(i, now + 0.5) for i in range(3, 5)])
            fleet = FleetProcess(settings, "b")
            await fleet.serving()
            try:
                values = await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            except AssertionError as failure:
                # Once in a CI run no incident came: say what the restarted app had taken in.
                seen = {
                    name: fleet.metric(name)
                    for name in (
                        "stallwatch_fleet_tallies_total",
                        "stallwatch_fleet_partials_total",
                        "stallwatch_fleet_tracked_keys",
                        "stallwatch_fleet_dropped_entries_total",
                    )
                }
                raise AssertionError(
                    f"{failure}; the restarted app's counts: {seen}\n"
                    f"{await fleet_evidence(settings)}\n{fleet.log_tail(60)}"
                ) from None
            await tallies.send([_failing(i, now + 1.0) for i in range(5)])
            await events.until(lambda vs: sum(v["incident"] == "open" for v in vs) >= 5)
            for _ in range(4):
                await incidents.poll()
                await events.poll()
            ids = {v["incident_id"] for _, v in incidents.records}
            assert len(ids) == 1, incidents.records
            assert values[0]["opened_window_start"] <= now
            advised = [v for _, v in events.records if v["incident"] == "open"]
            assert sorted(v["run_id"] for v in advised) == [f"run-{i}" for i in range(5)]
            assert {v["incident_id"] for v in advised} == ids
    finally:
        fleet.stop()


async def _recreate(settings: Settings, topic: NewTopic) -> None:
    """Delete a topic and create it again as `topic` says (deletion finishes in the background)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic.name])

        async def deleted() -> bool:
            return topic.name not in await admin.list_topics()

        await until(deleted, 60, f"topic {topic.name} deleted", interval_s=0.2)
    finally:
        await admin.close()
    await ensure_topics(settings, [topic])


async def test_a_table_that_cannot_be_written_stops_the_app_before_it_commits_past_the_window() -> None:
    # Once in CI the SIGKILL test's restarted app opened no incident: the killed app's changelog
    # was counted with no partitions (Faust had created it as the group joined), every table write
    # failed, and each partial was skipped with its offset committed, so the restart had neither
    # the window nor the partials. Here a changelog of the wrong size makes the writes fail.
    settings = fresh_settings()
    right = changelog_topic(FleetSettings(base=settings))
    await ensure_topics(settings, [NewTopic(right.name, 2, 1, topic_configs=right.topic_configs)])
    fleet = FleetProcess(settings, "wrong")
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with Tallies(settings) as tallies, Reader(settings, settings.incidents_topic) as incidents:
            await tallies.send([_failing(i, now) for i in range(5)])
            await until(lambda: not fleet.alive(), 60, lambda: f"the app's exit:\n{fleet.log_tail()}", 0.2)
            assert fleet.proc.poll() == EXIT_TABLE_UNWRITABLE, fleet.log_tail()
            # The changelog made right, a restart applies the partials not committed and opens it.
            await _recreate(settings, right)
            fleet = FleetProcess(settings, "right")
            await fleet.serving()
            values = await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            assert values[-1]["evidence"]["runs"] == 5
    finally:
        fleet.stop()


async def test_garbage_on_the_apps_inputs_is_dead_lettered_and_the_app_keeps_going() -> None:
    settings = fresh_settings()
    fleet = FleetProcess(settings)
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.deadletter_topic) as letters,
            Reader(settings, settings.incidents_topic) as incidents,
        ):
            await tallies.send_raw(b"\xff not json", key=b"x")
            await tallies.send_raw(b'{"v": 1, "tool": "search", "ts": "soon"}', key=b"acme\x1fsearch")
            # The partials topic is the app's own (merge to judge): a record there that the judge
            # cannot apply is kept as a dead letter with the error, not only counted and skipped.
            await tallies.send_raw(
                b'{"tenant": "acme"}', key=b"acme\x1fsearch", topic=settings.fleet_partials_topic
            )
            await tallies.send([_failing(i, now) for i in range(5)])
            found = [DeadLetter.model_validate(v) for v in await letters.until(lambda vs: len(vs) >= 3)]
            from_tallies = [letter.error for letter in found if letter.topic == settings.tallies_topic]
            from_partials = [
                letter.error for letter in found if letter.topic == settings.fleet_partials_topic
            ]
            assert from_tallies[0].startswith("not JSON") and "`ts` must be" in from_tallies[1], found
            assert len(from_partials) == 1 and from_partials[0].startswith("judge: KeyError"), found
            await incidents.until(lambda vs: any(v["state"] == "open" for v in vs))
            assert fleet.metric("stallwatch_fleet_dead_letters_total") == 3
    finally:
        fleet.stop()


async def test_a_dead_letters_digest_is_keyed_when_a_fingerprint_key_is_set() -> None:
    settings, key = fresh_settings(), "a fleet key of sixteen or more"
    fleet = FleetProcess(settings, env={"STALLWATCH_FINGERPRINT_KEY": key})
    raw = b'{"v": 1, "tool": "search", "ts": "secret 4711"}'
    try:
        await fleet.serving()
        async with Tallies(settings) as tallies, Reader(settings, settings.deadletter_topic) as letters:
            await tallies.send_raw(raw, key=b"acme\x1fsearch")
            [letter] = [DeadLetter.model_validate(v) for v in await letters.until(lambda vs: len(vs) >= 1)]
        assert letter.raw_digest == digest(raw, secret_from_key(key)).hex() != digest(raw, None).hex()
    finally:
        fleet.stop()


async def test_two_fleet_workers_share_the_tools_and_each_incident_opens_once() -> None:
    settings = fresh_settings()
    first, second = FleetProcess(settings, "one"), FleetProcess(settings, "two")
    now = float(int(time.time()))
    tools = [f"tool-{i}" for i in range(12)]
    try:
        await asyncio.gather(first.serving(), second.serving())
        async with Tallies(settings) as tallies, Reader(settings, settings.incidents_topic) as incidents:
            # Each tool fails in five runs whose tallies land on every partition (as the worker
            # writes them: by run), so no worker sees a whole tool without the re-keying step.
            await tallies.send([_failing(i, now, tool) for tool in tools for i in range(5)])
            values = await incidents.until(lambda vs: len({v["tool"] for v in vs}) == len(tools))
            await incidents.settle(2.0)  # and no second incident of a tool
            assert len({v["incident_id"] for _, v in incidents.records}) == len(tools)
            held = [len(first.open_incidents()), len(second.open_incidents())]
            assert sum(held) == len(tools) and min(held) > 0, held
            assert {v["kind"] for v in values} == {"tool_failing"}
    finally:
        first.stop()
        second.stop()


TWELVE_TOOLS = [f"tool-{i}" for i in range(12)]


@contextlib.asynccontextmanager
async def second_worker_joins(
    env: dict[str, str] | None = None,
) -> AsyncIterator[tuple[Settings, FleetProcess, FleetProcess]]:
    """A first fleet worker opens an incident for each of TWELVE_TOOLS, then a second one joins
    its group (both with `env`); yields the settings and the two workers once it serves."""
    settings = fresh_settings()
    first = FleetProcess(settings, "first", env=env)
    second = None
    now = float(int(time.time()))
    try:
        await first.serving()
        async with Tallies(settings) as tallies, Reader(settings, settings.incidents_topic) as incidents:
            await tallies.send([_failing(i, now, tool) for tool in TWELVE_TOOLS for i in range(5)])
            await incidents.until(lambda vs: len({v["tool"] for v in vs}) == len(TWELVE_TOOLS))
        assert len(first.open_incidents()) == len(TWELVE_TOOLS)
        second = FleetProcess(settings, "second", env=env)
        await second.serving()
        yield settings, first, second
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def test_a_second_worker_takes_over_half_the_tools_and_the_first_lets_them_go() -> None:
    async with second_worker_joins() as (_, first, second):
        # After the rebalance each open incident is listed by exactly one worker.
        def listed() -> list[str]:
            return [o["incident_id"] for o in first.open_incidents() + second.open_incidents()]

        await until(
            lambda: len(listed()) == len(TWELVE_TOOLS) and second.open_incidents(),
            60,
            lambda: f"every incident listed, some by the second worker: {listed()}",
            interval_s=0.2,
        )
        held = listed()
        assert sorted(held) == sorted(set(held)) and len(held) == len(TWELVE_TOOLS), held
        assert second.open_incidents() and len(first.open_incidents()) < len(TWELVE_TOOLS)


async def test_a_worker_giving_partitions_away_stops_listing_their_incidents_before_its_next_record() -> None:
    # No ticks: after the rebalance the first worker's judge gets no record at all (its index of
    # open incidents used to be rebuilt only then), yet its view must drop the tools it gave away.
    async with second_worker_joins({"STALLWATCH_FLEET_TICK_INTERVAL_S": "600"}) as (settings, first, _):
        await until(
            lambda: len(first.open_incidents()) < len(TWELVE_TOOLS),
            30,
            "the first worker listing fewer incidents after the rebalance",
            interval_s=0.2,
        )
        listed = {o["tool"] for o in first.open_incidents()}
        held = {partition_of(tally_key("acme", tool), settings.partitions) for tool in listed}
        assert listed and len(listed) < len(TWELVE_TOOLS) and len(held) <= settings.partitions // 2, listed
