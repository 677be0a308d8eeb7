"""One partition's batch of source messages applied to run states: pure, tested without a broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stallwatch.contract.commands import Command, DeadLetter
from stallwatch.contract.events import RawEvent
from stallwatch.contract.limits import bounded_key
from stallwatch.contract.parse import MAX_EVENT_BYTES, InvalidEvent
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock, is_expired
from stallwatch.engine.quota import LiveRuns
from stallwatch.engine.records import SKIPPED, RecordApplier
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.tallies import Tallies


class SourceRecord(Protocol):
    """What the batch step reads of a record: aiokafka's ConsumerRecord as it comes, or a
    SourceMessage in tests."""

    key: bytes | None
    value: bytes | None  # None is a tombstone
    partition: int
    offset: int
    timestamp: int  # milliseconds; the broker's when timestamp_type is LOG_APPEND_TIME
    timestamp_type: int


# Kafka's timestamp type of a record stamped by the partition's leader on append (1; 0 is the
# producer's CreateTime): the only record time no producer's clock can move.
LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class SourceMessage:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    timestamp: int = 0
    timestamp_type: int = LOG_APPEND_TIME


@dataclass
class BatchResult:
    commands: list[Command] = field(default_factory=list)
    caused_at: list[float] = field(default_factory=list)  # event time of each command's cause
    # (key, letter, reason); the key shortened like any id copied from input
    letters: list[tuple[bytes | None, bytes, str]] = field(default_factory=list)
    states: dict[str, RunState] = field(default_factory=dict)  # every run the batch touched
    events_by_type: dict[str, int] = field(default_factory=dict)
    skipped: int = 0  # at or below a run's last applied offset
    # Per-(tenant, tool) partial counts for the fleet app: (key, value) records of the tallies topic
    tallies: list[tuple[bytes, bytes]] = field(default_factory=list)
    published_at: float | None = None  # when its commands were acknowledged, if published ahead


class BatchApplier:
    """Applies a partition's events in offset order; bad input becomes a dead letter."""

    def __init__(
        self,
        detector: Detector,
        topic: str,
        max_event_bytes: int = MAX_EVENT_BYTES,
        tallies: Tallies | None = None,
        idle_timeout_s: float = float("inf"),
        ended_retention_s: float = float("inf"),
        deadletter_raw: bool = False,
        tenant: str | None = None,
    ) -> None:
        """`tenant`: `topic` is that tenant's events topic, whose tenant every run gets (None: the
        shared topic, where an event naming a tenant is refused). `tallies`: counts the batch for the fleet
        app (None: no tallies). A run idle past `idle_timeout_s` (ended: past
        `ended_retention_s`) on the partition clock at one of its records is met as absent
        (stallwatch/engine/expiry.py). `deadletter_raw`: dead letters keep the start of the raw
        input (off: its digest and size only)."""
        self.deadletter_raw = deadletter_raw
        self.detector = detector
        self.idle_timeout_s = idle_timeout_s
        self.ended_retention_s = ended_retention_s
        self.records = RecordApplier(detector, max_event_bytes, tenant, shared_topic=True)
        self.topic = topic
        self.tallies = tallies

    def apply(
        self,
        messages: Sequence[SourceRecord],
        load: Callable[[str], RunState | None],
        clock: PartitionClock,
        received_at: float,
        live: LiveRuns | None = None,
    ) -> BatchResult:
        """`load` gives a run's stored state; the states the batch touched are in the result.
        `clock`, the partition's broker time, moves with every record: its append time, or
        `received_at` (the worker's clock) on a topic that keeps the producers' CreateTime.
        Decisions read only the events' own `ts`, as replay does; whether a run has expired reads
        the clock as moved to the record, so on an append-time topic the answers are a function
        of the partition's log and the state it started from, however the log is cut into
        batches and whenever the worker's expiry scan ran. `live`: the partition's live runs by
        tenant, whose quota refuses a new run as a dead letter (None: no quota).

        The engine's one path (`RecordApplier`) parses, loads, applies and keeps; around it, the
        batch keys every record, skips the offsets applied already, moves the clock and counts."""
        result = BatchResult()
        secret = self.detector.secret  # keys the digests a dead letter and a long id carry
        tallies = self.tallies
        seen_at: list[float] = []

        def values() -> Iterator[bytes | None]:
            """Each record's value, the clock moved to its time first (bad input moves it too)."""
            for message in messages:
                seen = message.timestamp / 1000 if message.timestamp_type == LOG_APPEND_TIME else received_at
                clock.advance(seen)
                seen_at.append(seen)
                yield message.value

        def rejected(index: int, value: bytes | None, exc: InvalidEvent) -> None:
            message = messages[index]
            letter = DeadLetter.of(
                value, str(exc), self.topic, message.partition, message.offset, secret, self.deadletter_raw
            )
            result.letters.append((bounded_key(message.key, secret), letter.encode(), exc.reason))

        def applied(index: int, event: RawEvent, state: RunState | None, commands: list[Command]) -> None:
            kind = event["type"]
            result.events_by_type[kind] = result.events_by_type.get(kind, 0) + 1
            result.commands.extend(commands)
            result.caused_at.extend([event["ts"]] * len(commands))
            if state is not None:
                clock.touch(state, kind, seen_at[index])
                if tallies is not None:
                    tallies.observe(event, state, commands)

        idle, ended = self.idle_timeout_s, self.ended_retention_s

        def expired(state: RunState) -> bool:
            return clock.newest is not None and is_expired(state, clock.newest, idle, ended)

        keys = [message.key for message in messages]
        offsets = [message.offset for message in messages]
        for outcome in self.records.apply(
            values(),
            result.states,
            rejected,
            load=load,
            keys=keys,
            offsets=offsets,
            applied=applied,
            expired=expired,
            live=live,
        ):
            if outcome is SKIPPED:
                result.skipped += 1
        if tallies is not None:
            result.tallies = tallies.records()
        return result
