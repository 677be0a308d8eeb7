"""The one path from records to runs: parse each, load its run's state, apply the detector, keep it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar, overload

import orjson

from stallwatch.contract.commands import Command
from stallwatch.contract.events import RawEvent
from stallwatch.contract.faults import fault
from stallwatch.contract.parse import MAX_EVENT_BYTES, InvalidEvent, parse_event, parse_record
from stallwatch.contract.tenancy import claim_for_shared_topic, claim_for_tenant
from stallwatch.engine.detector import Detector
from stallwatch.engine.quota import DECLARED_BYTES_FACTOR, LiveRuns
from stallwatch.engine.state import RunState, UnreadableState

Letter = TypeVar("Letter")
# A record's value: bytes from a broker or a log, text from a caller of `EmbeddedEngine.handle_raw`.
Value = TypeVar("Value", bound=bytes | str | None)


class Skipped:
    """What `RecordApplier.apply` yields for a record at or below its run's last applied offset."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = Skipped()


class EngineFault(InvalidEvent):
    """A record the engine failed on (a bug, or input no check foresaw), as a dead letter's
    error: the exception's type and where it was raised, never its message, which may quote the
    event's content."""

    def __init__(self, reason: str, exc: BaseException, run_id: str | None) -> None:
        what = "parsing" if run_id is None else "applying"
        then = "" if run_id is None else ("; its run is quarantined: no longer judged, its calls are allowed")
        super().__init__(reason, f"stallwatch failed {what} this event ({fault(exc)}){then}")


class UnreadableRun(InvalidEvent):
    """A run whose stored state this version does not read, met at its first event since it was
    restored: its events were no longer in the events topic to rebuild it from."""

    def __init__(self, exc: UnreadableState) -> None:
        super().__init__(
            "state_format",
            f"this run's stored state cannot be read here ({exc}) nor rebuilt from the events topic "
            "(its run_started is gone from it); its run is quarantined: no longer judged, its calls "
            'are allowed (docs/operations.md, "Upgrading and rolling back")',
        )


class RecordApplier:
    """Parse, load, apply, keep, record after record: replay (`EmbeddedEngine.replay`) and the worker's
    batch step (`stallwatch_streams.worker.batch`) both go through `apply`, each adding what it needs around
    it (the worker: record keys, offsets, its partition's clock, tallies, dead letters with keys)."""

    def __init__(
        self,
        detector: Detector,
        max_event_bytes: int = MAX_EVENT_BYTES,
        tenant: str | None = None,
        shared_topic: bool = False,
    ) -> None:
        """`tenant`: the records come from that tenant's events topic, whose tenant every run and
        advisory gets. `shared_topic` (with no tenant): they come from the shared events topic,
        where an event naming a tenant is refused (stallwatch/contract/tenancy.py). Neither: an
        event names its own tenant, as in one process with no topics (the embedded engine)."""
        self.detector = detector
        self.max_event_bytes = max_event_bytes
        self.tenant = tenant
        self.shared_topic = shared_topic and tenant is None

    # Without offsets nothing is SKIPPED: replay's results are commands or letters alone.
    @overload
    def apply(
        self,
        values: Iterable[Value],
        states: dict[str, RunState],
        rejected: Callable[[int, Value, InvalidEvent], Letter | None],
        *,
        load: Callable[[str], RunState | None] | None = None,
        keys: Sequence[bytes | None] | None = None,
        offsets: None = None,
        applied: Callable[[int, RawEvent, RunState | None, list[Command]], None] | None = None,
        expired: Callable[[RunState], bool] | None = None,
        live: LiveRuns | None = None,
    ) -> Iterator[list[Command] | Letter]: ...

    @overload
    def apply(
        self,
        values: Iterable[Value],
        states: dict[str, RunState],
        rejected: Callable[[int, Value, InvalidEvent], Letter | None],
        *,
        load: Callable[[str], RunState | None] | None = None,
        keys: Sequence[bytes | None] | None = None,
        offsets: Sequence[int],
        applied: Callable[[int, RawEvent, RunState | None, list[Command]], None] | None = None,
        expired: Callable[[RunState], bool] | None = None,
        live: LiveRuns | None = None,
    ) -> Iterator[list[Command] | Skipped | Letter]: ...

    def apply(
        self,
        values: Iterable[Value],
        states: dict[str, RunState],
        rejected: Callable[[int, Value, InvalidEvent], Letter | None],
        *,
        load: Callable[[str], RunState | None] | None = None,
        keys: Sequence[bytes | None] | None = None,
        offsets: Sequence[int] | None = None,
        applied: Callable[[int, RawEvent, RunState | None, list[Command]], None] | None = None,
        expired: Callable[[RunState], bool] | None = None,
        live: LiveRuns | None = None,
    ) -> Iterator[list[Command] | Skipped | Letter]:
        """One result per record of `values`, in order: the commands an event caused, SKIPPED, or
        what `rejected(index, value, error)` makes of bad input (nothing when it returns None).

        `states`: the states in hand, by run id; every state an event was applied to is kept
        there. `load`: a run's state when it is not in hand (None: a new run). `keys`: each
        record's key, which must be its event's run id (None: records without keys, as in a
        log). `offsets`: each record's offset; a run remembers the last one applied, and a record
        at or below it is SKIPPED (None: offsets are not kept). `applied(index, event, state,
        commands)`: after each event applied (`state` is None for a call of an unknown run).
        `expired(state)`: true for a run expired by the time of this record (the worker's
        partition clock, moved to the record first); its event then meets no state, as if the
        expiry had deleted it already, so the answer does not depend on when the worker's scan
        ran (None: nothing expires, as in replay). `live`: the partition's live runs by tenant
        (stallwatch/engine/quota.py); a new run over its quota is a dead letter (None: no quota,
        as in replay).

        The hot loop of replay: each record is one call of its batch's `_RecordPass.record`, and
        nothing is done for what a caller did not ask for."""
        one_pass = _RecordPass(self, states, rejected, load, keys, offsets, applied, expired, live)
        record = one_pass.record
        for index, value in enumerate(values):
            result = record(index, value)
            if result is not None:
                yield result


class _RecordPass(Generic[Value, Letter]):
    """One call of `RecordApplier.apply`: its arguments, and a method per step of a record."""

    __slots__ = (
        "advisory_key",
        "applied",
        "detect",
        "detector",
        "expired",
        "keys",
        "live",
        "load",
        "max_bytes",
        "offsets",
        "rejected",
        "secret",
        "shared",
        "states",
        "tenant",
    )

    def __init__(
        self,
        applier: RecordApplier,
        states: dict[str, RunState],
        rejected: Callable[[int, Value, InvalidEvent], Letter | None],
        load: Callable[[str], RunState | None] | None,
        keys: Sequence[bytes | None] | None,
        offsets: Sequence[int] | None,
        applied: Callable[[int, RawEvent, RunState | None, list[Command]], None] | None,
        expired: Callable[[RunState], bool] | None,
        live: LiveRuns | None,
    ) -> None:
        self.detector = applier.detector
        self.detect = applier.detector.apply
        self.max_bytes, self.secret = applier.max_event_bytes, applier.detector.secret
        self.advisory_key, self.tenant = applier.detector.advisory_key, applier.tenant
        self.shared = applier.shared_topic
        self.states, self.rejected, self.load, self.keys = states, rejected, load, keys
        self.offsets, self.applied, self.expired, self.live = offsets, applied, expired, live

    def record(self, index: int, value: Value) -> list[Command] | Skipped | Letter | None:
        """The commands one record's event caused, SKIPPED, its letter, or None (no letter)."""
        try:
            event = self.parse(index, value)
        except InvalidEvent as exc:
            return self.rejected(index, value, exc)
        except Exception as exc:  # a fault of the parser itself: this record alone fails
            return self.rejected(index, value, EngineFault("parse_fault", exc, None))
        run_id = event["run_id"]
        state = self.states.get(run_id)
        counted = False  # the ledger of live runs has seen this event
        ended = False  # the run had ended before this event
        try:
            if state is None or self.offsets is not None:  # else the state in hand is the run's
                in_hand = self.in_hand(run_id, index, state)
                if isinstance(in_hand, Skipped):
                    return in_hand
                state = in_hand
            held = state  # the state the store holds for the run, expired or not
            if self.expired is not None and state is not None and self.expired(state):
                state = None
            if self.live is not None and state is None and event["type"] == "run_started":
                refusal = self.refusal(self.live, held, event)
                if refusal is not None:
                    return self.rejected(index, value, refusal)
            ended = state is not None and state.ended
            after, commands = self.detect(state, event)
            if self.live is not None:
                _count_live(self.live, state, after, ended)
                charge(self.live, run_id, event, after)
                counted = True
            self.keep(run_id, index, state, after)
            if self.applied is not None:
                self.applied(index, event, after, commands)
            return commands
        except UnreadableState as exc:
            return self.unreadable(index, value, event, state, exc)
        except Exception as exc:
            return self.fault(index, value, event, state, counted, ended, exc)

    def parse(self, index: int, value: Value) -> RawEvent:
        if self.keys is None:
            event = parse_event(value, self.max_bytes, self.secret, self.advisory_key)
        else:
            event = parse_record(self.keys[index], value, self.max_bytes, self.secret, self.advisory_key)
        if self.tenant is not None:
            claim_for_tenant(event, self.tenant)
        elif self.shared:
            claim_for_shared_topic(event)
        return event

    def in_hand(self, run_id: str, index: int, state: RunState | None) -> RunState | Skipped | None:
        """The run's state, loaded if it is not in hand, or SKIPPED for a record at or below its
        last applied offset."""
        offsets, load = self.offsets, self.load
        if offsets is not None:
            if state is None and load is not None:
                state = load(run_id)
                if state is not None and offsets[index] > state.last_offset:
                    self.states[run_id] = state  # in hand from now on: the detector changes it
            # Offsets and states are kept together (the worker commits them in one transaction),
            # so this never fires; were it broken, applying an event twice is the worse outcome.
            if state is not None and offsets[index] <= state.last_offset:
                return SKIPPED
        elif state is None and load is not None:
            state = load(run_id)
            if state is not None:
                self.states[run_id] = state
        return state

    def refusal(self, live: LiveRuns, held: RunState | None, event: RawEvent) -> InvalidEvent | None:
        """A new run's refusal by its tenant's quota, or None: admitted. In the place of an
        expired state, which frees its own place first."""
        freed = held if held is not None and not held.ended else None
        if freed is not None:
            live.remove(freed.tenant)
        refusal = live.refusal(self.detector.tenant_of(event))
        if refusal is not None and freed is not None:
            live.add(freed.tenant)  # still held
        return refusal

    def keep(self, run_id: str, index: int, state: RunState | None, after: RunState | None) -> None:
        # None only for an unknown run's call (a state in hand is never dropped)
        if after is not None:
            if after is not state:  # a new run (the detector changes a state in hand in place)
                self.states[run_id] = after
            if self.offsets is not None:
                after.last_offset = self.offsets[index]

    def fault(
        self,
        index: int,
        value: Value,
        event: RawEvent,
        state: RunState | None,
        counted: bool,
        ended: bool,
        exc: Exception,
    ) -> Letter | None:
        """Any fault while applying one event stays with it: the event is dead-lettered, its run
        quarantined (no longer judged: its calls are allowed), and every other record and run goes
        on. Replay and the worker fail on the same event alike."""
        run_id = event["run_id"]
        after = self.detector.quarantine(state, event)
        if self.live is not None and after is not None and not counted:
            _count_live(self.live, state, after, ended)
            charge(self.live, run_id, event, after)
        if after is not None:
            self.states[run_id] = after
            if self.offsets is not None:
                after.last_offset = self.offsets[index]
        return self.rejected(index, value, EngineFault("engine_fault", exc, run_id))

    def unreadable(
        self, index: int, value: Value, event: RawEvent, state: RunState | None, exc: UnreadableState
    ) -> Letter | None:
        """A run whose stored state this version does not read and could not rebuild:
        quarantined, its event dead-lettered. Counted live already, as the store found it
        (stallwatch_streams/worker/store.py)."""
        run_id = event["run_id"]
        after = self.detector.quarantine(state, event, hold=True)
        if event["type"] == "run_ended":
            after.release()
            if self.live is not None:
                self.live.remove(None)
        self.states[run_id] = after
        if self.offsets is not None:
            after.last_offset = self.offsets[index]
        return self.rejected(index, value, UnreadableRun(exc))


def charge(live: LiveRuns, run_id: str, event: RawEvent, after: RunState | None) -> None:
    """Charge a live run its state's estimated bytes after an event (its declarations at its
    start); an ended run's bytes are free (its tombstone is small and expires)."""
    if after is None:
        return
    if after.ended:
        live.discharge(run_id)
        return
    declared = None
    if event["type"] == "run_started":
        declared = DECLARED_BYTES_FACTOR * len(orjson.dumps(event.get("tools") or []))
    live.charge(run_id, after.tenant, after.approx_bytes(), declared)


def _count_live(live: LiveRuns, before: RunState | None, after: RunState | None, was_ended: bool) -> None:
    """Keep the ledger of live runs: a new run takes a place, a run that ends frees its own."""
    if after is None:
        return
    if before is None:
        live.add(after.tenant)
    elif after.ended and not was_ended:
        live.remove(after.tenant)
