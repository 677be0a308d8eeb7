"""Changelog restores shared by a worker's tenants (stallwatch_streams/worker/restores.py), on a
real broker: restores asked for together are one read, and each tenant gets exactly what its own
restore (`store.restore`) gives, its runs and position, whatever the others' changelogs hold."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from stallwatch.engine.state import RunState
from stallwatch.kafka.topics import ensure_topics
from stallwatch.settings import Settings
from stallwatch_streams.worker import store
from stallwatch_streams.worker.restores import SharedRestores
from stallwatch_streams.worker.store import POSITION_KEY, UnreadablePosition, encode_position
from tests.kafka_harness import fresh_settings

pytestmark = pytest.mark.kafka


async def tenant_with_changelog(settings: Settings, tenant: str, runs: int, position: bytes) -> Settings:
    """A tenant's topics, its changelog holding `runs` runs on each of two partitions (one run
    deleted again) and `position` on partition 0."""
    mine = settings.for_tenant(tenant)
    await ensure_topics(mine)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    await producer.start()
    try:
        for partition in (0, 1):
            for n in range(runs):
                state = RunState(mode="chat", started_ts=float(n), last_offset=n)
                key = f"{tenant}-{partition}-{n}".encode()
                await producer.send(mine.changelog_topic, state.to_bytes(), key=key, partition=partition)
            gone = f"{tenant}-{partition}-0".encode()
            await producer.send(mine.changelog_topic, None, key=gone, partition=partition)
        await producer.send(mine.changelog_topic, position, key=POSITION_KEY, partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    return mine


def image(restored: dict[int, store.PartitionStates]) -> dict[int, tuple[list[str], int | None]]:
    return {p: (sorted(run for run, _ in states.states()), states.position) for p, states in restored.items()}


async def test_restores_asked_for_together_are_each_tenants_own():
    settings = fresh_settings(2)
    tenants = [
        await tenant_with_changelog(settings, name, runs, encode_position(offset))
        for name, runs, offset in (("acme", 3, 40), ("globex", 1, 7), ("initech", 0, 0))
    ]
    shared = SharedRestores(settings)
    ticks = [0, 0, 0]

    def tick(n: int) -> None:
        ticks[n] += 1

    together = await asyncio.gather(
        *(shared.restore(t, [0, 1], lambda n=n: tick(n)) for n, t in enumerate(tenants))
    )
    alone = [await store.restore(t, [0, 1], lambda: None) for t in tenants]
    assert [image(r) for r in together] == [image(r) for r in alone]
    assert image(together[0]) == {0: (["acme-0-1", "acme-0-2"], 40), 1: (["acme-1-1", "acme-1-2"], None)}
    assert ticks[0] >= 1  # a tenant with records saw the read's fetches as progress


async def test_a_tenant_whose_position_is_unreadable_fails_its_own_restore_alone():
    settings = fresh_settings(2)
    good = await tenant_with_changelog(settings, "acme", 2, encode_position(5))
    bad = await tenant_with_changelog(settings, "globex", 2, b"\x00not a position")
    shared = SharedRestores(settings)
    results = await asyncio.gather(
        shared.restore(good, [0, 1], lambda: None),
        shared.restore(bad, [0, 1], lambda: None),
        return_exceptions=True,
    )
    assert isinstance(results[1], UnreadablePosition)
    assert not isinstance(results[0], BaseException)
    assert image(results[0])[0] == (["acme-0-1"], 5)
