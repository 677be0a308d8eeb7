"""Run states a worker cannot read (a later release's format) on a real broker: rebuilt from their
events while the events topic holds them, quarantined with a dead letter, a metric and a log line
naming the format where it does not; never a run's protection switched off in silence."""

from __future__ import annotations

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings
from stallwatch_streams.worker.store import POSITION_KEY
from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.steady_load import partition_of
from tests.streams.worker.fleet_logs import mixed_fleet

pytestmark = pytest.mark.kafka

LATER_FORMAT = b'[99,"a later release\'s run state"]'


async def overwrite_states(settings: Settings, run_ids: list[str]) -> None:
    """Every run's state in the changelog replaced by one in a format no release here reads."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    await producer.start()
    try:
        for run_id in run_ids:
            await producer.send(settings.changelog_topic, LATER_FORMAT, key=run_id.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def delete_events(settings: Settings, partition: int) -> None:
    """The events topic's partition emptied up to its end, as retention would."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(settings.events_topic, partition)
            end = (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()
        await admin.delete_records({tp: RecordsToDelete(end)})
    finally:
        await admin.close()


async def test_unreadable_states_are_rebuilt_from_their_events_or_quarantined_with_their_format_named():
    settings = fresh_settings(partitions=2)
    scripts = mixed_fleet(24)
    halves = [(s.lines()[: len(s.lines()) // 2], s.lines()[len(s.lines()) // 2 :]) for s in scripts]
    first = interleave_lines([h[0] for h in halves])
    second = interleave_lines([h[1] for h in halves])
    expected = by_run(replay_commands(first + second))
    first_commands = sum(len(c) for c in by_run(replay_commands(first)).values())
    run_ids = [s.run_id for s in scripts]
    gone = [r for r in run_ids if partition_of(r, 2) == 0]  # their events deleted: quarantined
    kept = [r for r in run_ids if partition_of(r, 2) == 1]  # their events kept: rebuilt
    assert gone and kept

    worker = WorkerProcess(settings, "before")
    try:
        await wait_until_serving(settings)
        await produce(settings, first)
        await collect(settings, settings.commands_topic, first_commands, 120)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.log_tail()
    await overwrite_states(settings, run_ids)
    await delete_events(settings, 0)

    worker = WorkerProcess(settings, "after")
    try:
        await wait_until_serving(settings)
        await produce(settings, second)
        got = by_run(
            await collect(
                settings,
                settings.commands_topic,
                sum(map(len, expected.values())) - sum(len(expected[r]) for r in gone),
                120,
                settle_s=SETTLE_S,
            )
        )
        letters = [orjson.loads(v) for v in await collect(settings, settings.deadletter_topic, len(gone), 60)]
        rebuilt = worker.metric('stallwatch_unreadable_states_total{outcome="rebuilt"}')
        quarantined = worker.metric('stallwatch_unreadable_states_total{outcome="quarantined"}')
        alive = worker.alive()
    finally:
        worker.stop()
    assert alive, worker.log_tail()
    # Rebuilt from their events: exactly what replay of the whole log answers.
    assert {r: got.get(r) for r in kept} == {r: expected[r] for r in kept}
    assert rebuilt == len(kept) and quarantined == len(gone)
    # Quarantined: one dead letter each, naming the format; their later calls allowed, never refused.
    named = [letter for letter in letters if "format 99" in letter["error"]]
    assert len(named) == len(gone) and all("quarantined" in letter["error"] for letter in named)
    after_restart = [orjson.loads(c) for r in gone for c in got.get(r, []) if c not in expected[r]]
    assert after_restart and all(c["type"] == "verdict" and c["decision"] == "allow" for c in after_restart)
    log = worker.log_path.read_text()
    assert f"{len(gone)} runs stored in a state format this version does not read (found: 99;" in log
    assert f"{len(kept)} rebuilt from the events topic" in log


def interleave_lines(logs: list[list[bytes]]) -> list[bytes]:
    """The runs' lines merged round robin, each run's own order kept."""
    out = []
    for i in range(max(map(len, logs))):
        out.extend(log[i] for log in logs if i < len(log))
    return out


async def changelog_positions(settings: Settings) -> dict[int, bytes]:
    """Each partition's last position record, as the changelog holds it."""
    consumer = committed_reader({"bootstrap_servers": settings.bootstrap})
    await consumer.start()
    positions: dict[int, bytes] = {}
    try:
        tps = [TopicPartition(settings.changelog_topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)

        def take(tp: TopicPartition, records: list) -> None:
            for record in records:
                if record.key == POSITION_KEY:
                    positions[tp.partition] = record.value

        await read_to_end(consumer, tps, take)
    finally:
        await consumer.stop()
    return positions


async def write_changelog(settings: Settings, records: list[tuple[int, bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    await producer.start()
    try:
        for partition, key, value in records:
            await producer.send_and_wait(settings.changelog_topic, value, key=key, partition=partition)
    finally:
        await producer.stop()


async def test_a_later_releases_additions_to_the_changelog_are_read_past():
    settings = fresh_settings(partitions=2)
    scripts = mixed_fleet(6)
    first = interleave_lines([s.lines()[: len(s.lines()) // 2] for s in scripts])
    second = interleave_lines([s.lines()[len(s.lines()) // 2 :] for s in scripts])
    expected = by_run(replay_commands(first + second))
    worker = WorkerProcess(settings, "before")
    try:
        await wait_until_serving(settings)
        await produce(settings, first)
        await collect(
            settings,
            settings.commands_topic,
            sum(len(c) for c in by_run(replay_commands(first)).values()),
            60,
        )
    finally:
        worker.stop()
    positions = await changelog_positions(settings)
    assert set(positions) == {0, 1}
    # A value appended after the clock, and a control record of a kind this release does not know.
    await write_changelog(
        settings,
        [(p, POSITION_KEY, value[:-1] + b',7,{"more":true}]') for p, value in positions.items()]
        + [(p, b"\xffa-later-kind", b"anything") for p in positions],
    )
    worker = WorkerProcess(settings, "after")
    try:
        await wait_until_serving(settings)
        await produce(settings, second)
        got = by_run(
            await collect(
                settings, settings.commands_topic, sum(map(len, expected.values())), 120, settle_s=SETTLE_S
            )
        )
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    assert {r: got.get(r) for r in expected} == expected
    assert worker.metric("stallwatch_events_skipped_total") == 0  # resumed at the positions read


async def test_a_position_record_of_no_known_shape_refuses_the_partition_in_one_line():
    settings = fresh_settings(partitions=2)
    worker = WorkerProcess(settings, "before")
    try:
        await wait_until_serving(settings)
    finally:
        worker.stop()
    await write_changelog(settings, [(0, POSITION_KEY, b'{"offset": 12}')])
    worker = WorkerProcess(settings, "after")
    try:
        worker.proc.wait(90)
    finally:
        worker.stop()
    assert worker.proc.returncode == 1
    log = worker.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log
    (line,) = [line for line in log.splitlines() if "position record" in line]
    assert (
        "partition 0's position record" in line
        and "does not read" in line
        and "Upgrading and rolling back" in line
    )
