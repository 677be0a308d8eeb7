"""One partition's batch of source messages applied to run states: pure, tested without a broker."""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Iterator, Sequence
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


# The error of an event that killed the worker applying it, twice in a row.
WORKER_CRASH = (
    "stallwatch's worker died while applying this event, twice in a row (a crash, or killed for its "
    "memory or time); its run is quarantined: no longer judged, its calls are allowed"
)
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
    # Observe-only runs' commands, with their run's tenant, for the would-have counters.
    observed: list[tuple[str | None, list[Command]]] = field(default_factory=list)


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
        """The whole batch at once (see `steps`)."""
        steps = self.steps(messages, load, clock, received_at, live)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def steps(
        self,
        messages: Sequence[SourceRecord],
        load: Callable[[str], RunState | None],
        clock: PartitionClock,
        received_at: float,
        live: LiveRuns | None = None,
        poison: Collection[int] = (),
    ) -> Generator[None, None, BatchResult]:
        """The batch one record at a time: yields after each record, returns the result. A
        caller on an event loop lets other work run between records (the worker's pipelines
        share one loop); the result is the same however the steps are spaced.

        `load` gives a run's stored state; the states the batch touched are in the result.
        `clock`, the partition's broker time, moves with every record: its append time, or
        `received_at` (the worker's clock) on a topic that keeps the producers' CreateTime.
        Decisions read only the events' own `ts`, as replay does; whether a run has expired reads
        the clock as moved to the record, so on an append-time topic the answers are a function
        of the partition's log and the state it started from, however the log is cut into
        batches and whenever the worker's expiry scan ran. `live`: the partition's live runs by
        tenant, whose quota refuses a new run as a dead letter (None: no quota). `poison`: the
        offsets of events that killed the worker applying them (stallwatch_streams/worker/
        attempts.py), each dead-lettered unread and its run quarantined.

        The engine's one path (`RecordApplier`) parses, loads, applies and keeps; around it, the
        batch keys every record, skips the offsets applied already, moves the clock and counts."""
        result = BatchResult()
        idle, ended = self.idle_timeout_s, self.ended_retention_s

        def expired(state: RunState) -> bool:
            return clock.newest is not None and is_expired(state, clock.newest, idle, ended)

        def segment(part: Sequence[SourceRecord]) -> Generator[None, None, None]:
            return self._segment(part, result, load, clock, received_at, expired, live)

        first = 0
        if poison:
            for index, message in enumerate(messages):
                if message.offset in poison:
                    yield from segment(messages[first:index])
                    self._poisoned(message, result, load, clock, received_at)
                    yield
                    first = index + 1
        yield from segment(messages[first:] if first else messages)
        if self.tallies is not None:
            result.tallies = self.tallies.records()
        return result

    def _segment(
        self,
        part: Sequence[SourceRecord],
        result: BatchResult,
        load: Callable[[str], RunState | None],
        clock: PartitionClock,
        received_at: float,
        expired: Callable[[RunState], bool],
        live: LiveRuns | None,
    ) -> Generator[None, None, None]:
        """The records of `part` through the engine's one path, in order, into `result`."""
        secret = self.detector.secret  # keys the digests a dead letter and a long id carry
        tallies = self.tallies
        seen_at: list[float] = []

        def values() -> Iterator[bytes | None]:
            """Each record's value, the clock moved to its time first (bad input moves it too)."""
            for message in part:
                seen = message.timestamp / 1000 if message.timestamp_type == LOG_APPEND_TIME else received_at
                clock.advance(seen)
                seen_at.append(seen)
                yield message.value

        def rejected(index: int, value: bytes | None, exc: InvalidEvent) -> None:
            message = part[index]
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
                if commands and state.policy.observe_only:
                    result.observed.append((state.tenant, commands))
                clock.touch(state, kind, seen_at[index])
                if tallies is not None:
                    tallies.observe(event, state, commands)

        for outcome in self.records.apply(
            values(),
            result.states,
            rejected,
            load=load,
            keys=[message.key for message in part],
            offsets=[message.offset for message in part],
            applied=applied,
            expired=expired,
            live=live,
        ):
            if outcome is SKIPPED:
                result.skipped += 1
            yield

    def _poisoned(
        self,
        message: SourceRecord,
        result: BatchResult,
        load: Callable[[str], RunState | None],
        clock: PartitionClock,
        received_at: float,
    ) -> None:
        """An event that killed the worker applying it: a dead letter, never parsed again, and its
        run (the record's key) quarantined, as for a fault of the engine."""
        clock.advance(message.timestamp / 1000 if message.timestamp_type == LOG_APPEND_TIME else received_at)
        secret = self.detector.secret
        letter = DeadLetter.of(
            message.value,
            WORKER_CRASH,
            self.topic,
            message.partition,
            message.offset,
            secret,
            self.deadletter_raw,
        )
        result.letters.append((bounded_key(message.key, secret), letter.encode(), "worker_crash"))
        try:
            run_id = None if message.key is None else message.key.decode()
        except UnicodeDecodeError:
            run_id = None
        if run_id is None:
            return
        state = result.states.get(run_id) or load(run_id)
        if state is not None and message.offset > state.last_offset:
            state.quarantined = True
            state.last_offset = message.offset
            result.states[run_id] = state
