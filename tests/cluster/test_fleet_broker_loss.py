"""The fleet app on the three-node cluster: an incident whose threshold is crossed while a node
is down opens once, with one id, and every run of it is advised once."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from stallwatch.settings import Settings
from tests import cluster_harness as nodes
from tests.streams.fleet.harness import (
    FleetProcess,
    Reader,
    Tallies,
    fleet_evidence,
    tally,
    until_in_changelog,
)

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]


def _failing(run: int, ts: float) -> dict:
    return tally("search", ts, runs=[f"run-{run}"], calls=3, failures=3)


async def test_an_incident_that_crosses_its_threshold_while_a_node_is_down_opens_once(cluster) -> None:
    settings = Settings(bootstrap=nodes.bootstrap(), topic_prefix=f"f{uuid.uuid4().hex[:10]}", partitions=4)
    await nodes.until_whole()
    fleet = FleetProcess(
        settings, "a", env={"STALLWATCH_REPLICATION_FACTOR": "3", "STALLWATCH_MIN_INSYNC_REPLICAS": "2"}
    )
    now = float(int(time.time()))
    node = 0
    try:
        await fleet.serving()
        async with (
            Tallies(settings) as tallies,
            Reader(settings, settings.incidents_topic) as incidents,
            Reader(settings, settings.events_topic) as events,
        ):
            # Three runs fail and the app holds them in its window; then the node leading the
            # most of its input goes, and two more runs fail while it is away: the fifth crosses
            # the threshold.
            await tallies.send([_failing(i, now) for i in range(3)])
            await until_in_changelog(settings, {f"run-{i}" for i in range(3)})
            node = await nodes.leader_of_most(settings.tallies_topic)
            nodes.kill(node)
            await tallies.send([_failing(i, now + 0.5) for i in range(3, 5)])
            try:
                await incidents.until(lambda vs: any(v["state"] == "open" for v in vs), 90)
            except AssertionError as failure:
                raise AssertionError(f"{failure}\n{await fleet_evidence(settings)}") from None
            await asyncio.to_thread(nodes.start, node)
            node = 0
            # The runs keep failing once the node is back: the same incident, no second one.
            await tallies.send([_failing(i, now + 1.0) for i in range(5)])
            await events.until(lambda vs: sum(v["incident"] == "open" for v in vs) >= 5, 60)
            for _ in range(4):
                await incidents.poll()
                await events.poll()
            ids = {v["incident_id"] for _, v in incidents.records}
            assert len(ids) == 1, incidents.records
            advised = [v for _, v in events.records if v["incident"] == "open"]
            assert sorted(v["run_id"] for v in advised) == [f"run-{i}" for i in range(5)]
            assert {v["incident_id"] for v in advised} == ids
            assert fleet.alive(), fleet.log_tail()
    finally:
        fleet.stop()
        if node:
            await asyncio.to_thread(nodes.start, node)
