"""`stallwatch fleet` creates its table's changelog itself, led, before Faust joins the group: a
changelog Faust creates at start-up can be missing from the metadata at the join, and every table
write then fails (PartitionsMismatch, "0 partitions") until the next metadata refresh."""

from __future__ import annotations

import orjson
import pytest

from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import FleetService, changelog_topic
from stallwatch_streams.fleet.settings import FleetSettings
from tests.kafka_harness import fresh_settings
from tests.streams.fleet.harness import FleetProcess


def test_the_created_changelog_is_the_one_faust_uses():
    cfg = FleetSettings(base=Settings(topic_prefix="tprefix", partitions=6))
    topic, table = changelog_topic(cfg), FleetService(cfg).table
    assert (topic.name, topic.num_partitions) == (table.changelog_topic_name, table.partitions)
    assert topic.topic_configs["cleanup.policy"] == "compact"


@pytest.mark.kafka
async def test_the_changelog_exists_before_faust_starts():
    settings = fresh_settings()
    fleet = FleetProcess(settings)
    try:
        await fleet.serving()
        log = fleet.log_path.read_text(errors="replace")
    finally:
        fleet.stop()
    name = changelog_topic(FleetSettings(base=settings)).name
    assert f"Topic {name!r} created" not in log  # Faust found it, led, and did not create it
    assert "Ignoring missing topic" not in log


@pytest.mark.kafka
async def test_the_fleet_app_logs_json_lines_when_asked():
    fleet = FleetProcess(fresh_settings(), env={"STALLWATCH_LOG_FORMAT": "json"})
    try:
        await fleet.serving()
    finally:
        fleet.stop()
    lines = fleet.log_path.read_text(errors="replace").splitlines()
    assert lines and all(line.startswith("{") for line in lines), [x for x in lines if not x.startswith("{")][
        :3
    ]
    assert any(orjson.loads(line)["msg"].endswith("Ready") for line in lines)
