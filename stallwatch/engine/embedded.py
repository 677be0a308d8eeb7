"""Many runs in one process: the embedded engine behind replay and the in-process client."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from stallwatch.contract.commands import Command, DeadLetter
from stallwatch.contract.events import RawEvent
from stallwatch.contract.parse import MAX_EVENT_BYTES, InvalidEvent
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.detector import Detector
from stallwatch.engine.records import RecordApplier
from stallwatch.engine.state import RunState


class Counters(Protocol):
    """What the engine counts when asked (stallwatch-streams' StallwatchMetrics is one): a protocol,
    so that the light package imports neither prometheus-client nor the stream jobs."""

    def count_event(self, kind: str) -> None: ...
    def count_commands(self, commands: list[Command]) -> None: ...
    def count_observed(self, tenant: str | None, commands: list[Command]) -> None: ...
    def count_dead_letter(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Rejected:
    """A dead letter and the short reason label that metrics count it under."""

    letter: DeadLetter
    reason: str


class EmbeddedEngine:
    """Run states keyed by run id, in memory; an ended run keeps a small tombstone."""

    def __init__(
        self,
        admin_policy: AdminPolicy | None = None,
        max_event_bytes: int = MAX_EVENT_BYTES,
        metrics: Counters | None = None,
        secret: bytes | None = None,
        deadletter_raw: bool = False,
        advisory_key: bytes | None = None,
        tenant: str | None = None,
        shared_topic: bool = False,
    ) -> None:
        """`secret`: the key of every digest, shared with the runtimes (Settings.fingerprint_secret).
        `deadletter_raw`: dead letters keep the start of the raw input (off: digest and size).
        `advisory_key`: advisories read from a log count only when the fleet app signed them
        (Settings.advisory_secret). `tenant`: the events are that tenant's, read from its events
        topic. `shared_topic` (with no tenant): the events are read from the shared events topic,
        where one that names a tenant is refused. Neither: each event names its own tenant."""
        self.detector = Detector(admin_policy, secret, advisory_key)
        self.deadletter_raw = deadletter_raw
        self.records = RecordApplier(self.detector, max_event_bytes, tenant, shared_topic)
        self.runs: dict[str, RunState] = {}
        # The workers' counters, kept only when asked for (prometheus-client installed).
        self.metrics = metrics

    def handle(self, event: RawEvent) -> list[Command]:
        """Apply one validated event (a dict, as `parse_event` returns it)."""
        run_id = event["run_id"]
        before = self.runs.get(run_id)
        try:
            state, commands = self.detector.apply(before, event)
        except Exception:  # the fault stays with the event; the run is quarantined
            state, commands = self.detector.quarantine(before, event), []
            if self.metrics is not None:
                self.metrics.count_dead_letter("engine_fault")
            if event["type"] == "call_proposed":  # answered at once, as every later call is
                commands = self.detector.quarantined_verdict(event)
        if state is not None:
            self.runs[run_id] = state
        if self.metrics is not None:
            self._count(0, event, state, commands)
        return commands

    def handle_raw(
        self, raw: bytes | str, topic: str = "-", partition: int = 0, offset: int = 0
    ) -> list[Command] | Rejected:
        """Parse and apply one serialised event; bad input becomes a dead letter, never an error."""
        return next(
            self.records.apply(
                (raw,),
                self.runs,
                lambda _, value, exc: self._reject(value, exc, topic, partition, offset),
                applied=None if self.metrics is None else self._count,
            )
        )

    def replay(
        self,
        lines: Iterable[bytes],
        source: str = "-",
        line_number: Callable[[int], int] | None = None,
        applied: Callable[[int, RawEvent, RunState | None, list[Command]], None] | None = None,
    ) -> Iterator[list[Command] | Rejected]:
        """`handle_raw` over a log's lines (the offset of each is its line number), one result per
        non-blank line: the engine's one path from records to runs (`RecordApplier`).
        For a share of a log (`stallwatch replay --jobs`): `line_number(index)`, the log's line
        number of the index-th line given (by default, the index); `applied`, called after each
        event applied, in place of the metrics' count."""
        number = line_number or (lambda index: index)
        return self.records.apply(
            lines,
            self.runs,
            lambda index, line, exc: self._reject_line(line, exc, source, number(index)),
            applied=applied or (None if self.metrics is None else self._count),
        )

    def _count(self, _: int, event: RawEvent, state: RunState | None, commands: list[Command]) -> None:
        if (metrics := self.metrics) is not None:  # always, as passed only when metrics are set
            metrics.count_event(event["type"])
            metrics.count_commands(commands)
            if commands and state is not None and state.policy.observe_only:
                metrics.count_observed(state.tenant, commands)

    def _reject_line(self, line: bytes, error: InvalidEvent, source: str, offset: int) -> Rejected | None:
        """A log's bad line as a dead letter; a blank line (it fails to parse too: tested only
        then, not on every line) is no event at all."""
        if not line or line.isspace():
            return None
        return self._reject(line.rstrip(b"\r\n"), error, source, 0, offset)

    def _reject(
        self, raw: bytes | str, error: InvalidEvent, topic: str, partition: int, offset: int
    ) -> Rejected:
        if self.metrics is not None:
            self.metrics.count_dead_letter(error.reason)
        letter = DeadLetter.of(
            raw, str(error), topic, partition, offset, self.detector.secret, self.deadletter_raw
        )
        return Rejected(letter, error.reason)
