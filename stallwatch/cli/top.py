"""`stallwatch top`: the fleet's open incidents, and live counts from the commands topic: stops per
code, refusals per tool."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

import orjson
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from aiokafka.structs import ConsumerRecord

from stallwatch.contract.commands import ConflictingCommand, FirstCopies
from stallwatch.contract.stop_codes import STOPS
from stallwatch.engine.names import printable
from stallwatch.kafka.aiokafka_patch import Consumer, Producer
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.kafka.topics import no_broker, no_topic, quiet_kafka_log
from stallwatch.settings import Settings


@dataclass
class Tally:
    stops: Counter = field(default_factory=Counter)  # code -> stops
    would_stops: Counter = field(default_factory=Counter)  # observe-only runs: code -> would-have stops
    verdicts: Counter = field(default_factory=Counter)  # (tool, decision or code) -> verdicts
    nudges: int = 0
    stall_nudges: int = 0  # coder mode: a call's same result across changes
    # coder mode: workspace version at a stop -> stops (a Counter: a live top runs for days)
    workspace_versions: Counter = field(default_factory=Counter)
    # stop code -> what its stops name (a failing tool, a stalled call) -> stops
    subjects: dict[str, Counter] = field(default_factory=dict)
    copies: FirstCopies = field(default_factory=FirstCopies)  # each command id counted once

    def add(self, raw: bytes) -> None:
        try:
            command = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        if not isinstance(command, dict) or not self.copies.first(str(command.get("command_id")), raw):
            return  # published again after a worker's restart: counted once
        kind = command.get("type")
        detail = command.get("detail")
        detail = detail if isinstance(detail, dict) else {}
        if kind == "stop":
            code = _label(command.get("code"))
            self.stops[code] += 1
            stop_kind = STOPS.get(code)
            if stop_kind is not None and stop_kind.subject is not None:
                named = _label(detail.get(stop_kind.subject[0]))
                self.subjects.setdefault(code, Counter())[named] += 1
            version = detail.get("workspace_version")
            if type(version) is int:
                self.workspace_versions[version] += 1
        elif kind == "would_stop":
            self.would_stops[_label(command.get("code"))] += 1
        elif kind == "verdict":
            tool = _label(command.get("tool") or "?")
            would = command.get("would_code")
            if would is not None:  # observe-only: its own column, apart from the real refusals
                self.verdicts[(tool, "would " + _label(would))] += 1
            else:
                self.verdicts[(tool, _label(command.get("code") or "allow"))] += 1
        elif kind == "nudge":
            self.nudges += 1
            if "same_result_runs" in detail:
                self.stall_nudges += 1

    def render(self, out: TextIO) -> None:
        """Every name and code is read from the topic unvalidated: each is `printable`."""
        out.write(f"stops: {sum(self.stops.values())}   nudges: {self.nudges}\n")
        for code, count in self.stops.most_common():
            out.write(f"  {printable(code):<16} {count:>8}\n")
        if self.would_stops:
            out.write(f"would have stopped (observe-only): {sum(self.would_stops.values())}\n")
            for code, count in self.would_stops.most_common():
                out.write(f"  {printable(code):<16} {count:>8}\n")
        tools = sorted({tool for tool, _ in self.verdicts})
        codes = sorted({code for _, code in self.verdicts}, key=lambda c: (c != "allow", c))
        out.write(
            "verdicts per tool:\n  " + f"{'tool':<24}" + "".join(f"{printable(c):>18}" for c in codes) + "\n"
        )
        for tool in sorted(tools, key=lambda t: -sum(v for (x, _), v in self.verdicts.items() if x == t)):
            out.write(
                f"  {printable(tool):<24}" + "".join(f"{self.verdicts[(tool, c)]:>18}" for c in codes) + "\n"
            )
        for code, named in self.subjects.items():
            subject = STOPS[code].subject
            if subject is None:  # never: only codes with a subject are tallied
                continue
            out.write(
                f"{subject[1]}: "
                + ", ".join(f"{printable(name)} {count}" for name, count in named.most_common())
                + "\n"
            )
        if self.stall_nudges or self.workspace_versions:
            out.write(
                f"coder runs: {self.stall_nudges} stall nudges; workspace version at stop: "
                f"{_median(self.workspace_versions)}, max "
                f"{max(self.workspace_versions, default='-')}\n"
            )


@dataclass
class OpenIncidents:
    """The fleet app's open incidents, from its compacted `{prefix}.incidents` topic:
    the latest record of each incident id is its state."""

    open: dict[str, dict] = field(default_factory=dict)  # incident id -> its latest record

    def add(self, key: bytes | None, raw: bytes | None) -> None:
        incident = None
        if raw is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                incident = orjson.loads(raw)
        if not isinstance(incident, dict):
            incident = {}
        ident = incident.get("incident_id") or (key.decode("utf-8", "replace") if key else None)
        if ident is None:
            return
        if incident.get("state") == "open":
            self.open[ident] = incident
        else:  # closed, a tombstone, or unreadable: no longer shown as open
            self.open.pop(ident, None)

    def render(self, out: TextIO) -> None:
        out.write(f"open incidents: {len(self.open)}\n")
        for incident in sorted(self.open.values(), key=_newest_first):
            evidence = incident.get("evidence") or {}
            seen = (
                printable(", ".join(f"{k} {v}" for k, v in evidence.items() if v))
                if isinstance(evidence, dict)
                else printable(evidence)
            )
            opened = incident.get("opened_at")
            when = time.strftime("%H:%M:%S", time.gmtime(opened)) if isinstance(opened, int | float) else "?"
            out.write(
                f"  {printable(incident.get('kind', '?')):<17} "
                f"{printable(incident.get('tool', '?')):<20} "
                f"tenant {printable(incident.get('tenant') or '-'):<12} opened {when} UTC  "
                f"{seen}\n"
            )


def _newest_first(incident: dict) -> float:
    opened = incident.get("opened_at")
    return -opened if isinstance(opened, int | float) else 0.0


def _label(value: object) -> str:
    """A name or code read from the topic, as a string (a list or number in its place must not
    break the counting, the sorting or the columns)."""
    return value if isinstance(value, str) else str(value)


def _median(counts: Counter) -> int | str:
    """The median of values counted in a Counter (value -> how many)."""
    total, seen = sum(counts.values()), 0
    for value in sorted(counts):
        seen += counts[value]
        if 2 * seen >= total:
            return value
    return "-"


async def top(
    settings: Settings, out: TextIO, once: bool, from_beginning: bool, every_s: float = 2.0
) -> Tally:
    """Read every commands partition; with `once`, read up to the current end, print, return."""
    options = aiokafka_options(settings)
    partitions = await partitions_of(settings, settings.commands_topic)
    consumer = committed_reader(options)
    await started(consumer, settings)
    tally, incidents = Tally(), OpenIncidents()

    def count(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        for record in records:
            if tp.topic == settings.incidents_topic:
                incidents.add(record.key, record.value)
            else:
                tally.add(record.value)

    try:
        tps = [TopicPartition(settings.commands_topic, p) for p in sorted(partitions)]
        # The incidents topic is read whole (compacted: the current state of each incident); it
        # exists once a worker or fleet app has created the topics.
        incident_tps = (
            [
                TopicPartition(settings.incidents_topic, p)
                for p in sorted(await partitions_of(settings, settings.incidents_topic))
            ]
            if settings.incidents_topic in await consumer.topics()
            else []
        )
        consumer.assign(tps + incident_tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        if incident_tps:
            await consumer.seek_to_beginning(*incident_tps)
        if once:
            await read_to_end(consumer, tps + incident_tps, count)
            incidents.render(out)
            tally.render(out)
            return tally
        shown = time.monotonic()
        while True:
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                count(tp, records)
            if time.monotonic() - shown >= every_s:
                # Clear the terminal, like top; into a file or a pipe, a blank line between views.
                out.write("\x1b[2J\x1b[H" if out.isatty() else "\n")
                incidents.render(out)
                tally.render(out)
                out.flush()
                shown = time.monotonic()
    finally:
        await consumer.stop()


async def started(client: Consumer | Producer, settings: Settings) -> None:
    """`client` started, or closed and SetupError raised when no broker answers (in one line:
    aiokafka's own complaint about the connection is held back while it starts)."""
    try:
        with quiet_kafka_log():
            await client.start()
    except KafkaConnectionError:
        await client.stop()
        raise no_broker(settings) from None


async def partitions_of(settings: Settings, topic: str) -> set[int]:
    """The topic's partitions, from a fresh metadata request (a consumer without a group has
    no public way to ask); SetupError when there is no such topic."""
    producer = Producer(**aiokafka_options(settings))
    await started(producer, settings)
    try:
        partitions = (await producer.client.fetch_all_metadata()).partitions_for_topic(topic)
    finally:
        await producer.stop()
    if not partitions:
        raise no_topic(settings, topic)
    return set(partitions)


def main(settings: Settings, once: bool, from_beginning: bool) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        try:
            asyncio.run(top(settings, sys.stdout, once, from_beginning))
        except ConflictingCommand as exc:
            sys.stderr.write(f"stallwatch top: {exc}: the workers broke the contract\n")
            return 1
    return 0
