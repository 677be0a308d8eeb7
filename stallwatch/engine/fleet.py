"""Many runs in one process: the embedded engine behind replay and the in-process client."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from stallwatch.contract.commands import Command, DeadLetter
from stallwatch.contract.parse import MAX_EVENT_BYTES, InvalidEvent, parse_event
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.detector import Detector, Event
from stallwatch.engine.state import RunState


class Counters(Protocol):
    """What the engine counts when asked (stallwatch.metrics.StallwatchMetrics is one): a protocol,
    so that the pure engine imports nothing above it."""

    def count_event(self, kind: str) -> None: ...
    def count_commands(self, commands: list[Command]) -> None: ...
    def count_dead_letter(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Rejected:
    """A dead letter and the short reason label that metrics count it under."""

    letter: DeadLetter
    reason: str


class Fleet:
    """Run states keyed by run id, in memory; an ended run keeps a small tombstone."""

    def __init__(self, admin_policy: AdminPolicy | None = None,
                 max_event_bytes: int = MAX_EVENT_BYTES, metrics: Counters | None = None,
                 secret: bytes | None = None) -> None:
        """`secret`: the key of every digest, shared with the runtimes (Settings.fingerprint_secret)."""
        self.detector = Detector(admin_policy, secret)
        self.max_event_bytes = max_event_bytes
        self.runs: dict[str, RunState] = {}
        # The workers' counters, kept only when asked for (prometheus-client installed).
        self.metrics = metrics

    def handle(self, event: Event) -> list[Command]:
        """Apply one validated event (a dict, as `parse_event` returns it)."""
        run_id = event["run_id"]
        state, commands = self.detector.apply(self.runs.get(run_id), event)
        if state is not None:
            self.runs[run_id] = state
        if self.metrics is not None:
            self.metrics.count_event(event["type"])
            self.metrics.count_commands(commands)
        return commands

    def handle_raw(self, raw: bytes | str, topic: str = "-", partition: int = 0,
                   offset: int = 0) -> list[Command] | Rejected:
        """Parse and apply one serialised event; bad input becomes a dead letter, never an error."""
        try:
            event = parse_event(raw, self.max_event_bytes, self.detector.secret)
        except InvalidEvent as exc:
            return self._reject(raw, exc, topic, partition, offset)
        return self.handle(event)

    def replay(self, lines: Iterable[bytes], source: str = "-") -> Iterator[list[Command] | Rejected]:
        """`handle_raw` over a log's lines, one result per non-blank line; the hot path, so inlined."""
        if self.metrics is not None:  # the counting path; the lean one below counts nothing
            for offset, line in enumerate(lines):
                if line and not line.isspace():
                    yield self.handle_raw(line.rstrip(b"\r\n"), source, 0, offset)
            return
        apply, runs, max_bytes = self.detector.apply, self.runs, self.max_event_bytes
        secret = self.detector.secret
        for offset, line in enumerate(lines):
            try:
                event = parse_event(line, max_bytes, secret)
            except InvalidEvent as exc:
                # Blank lines fail to parse too: skipped here rather than tested on every line.
                if line and not line.isspace():
                    yield self._reject(line.rstrip(b"\r\n"), exc, source, 0, offset)
                continue
            run_id = event["run_id"]
            state = runs.get(run_id)
            applied, commands = apply(state, event)
            if applied is not state:  # a new run (the detector changes a known one in place)
                runs[run_id] = applied
            yield commands

    def _reject(self, raw: bytes | str, error: InvalidEvent, topic: str, partition: int,
                offset: int) -> Rejected:
        if self.metrics is not None:
            self.metrics.count_dead_letter(error.reason)
        letter = DeadLetter.of(raw, str(error), topic, partition, offset, self.detector.secret)
        return Rejected(letter, error.reason)
