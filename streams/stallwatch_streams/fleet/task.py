"""One partials partition this fleet worker judges, as a task: its (tenant, tool) keys, least
recently updated first (an evicted key's tombstone must go to its own changelog partition), those
with an open incident, and the keys it holds per tenant, over the windows and incidents the table
keeps; made on assignment, its keys read from the table once Faust restored it, closed when the
partition is given away (streams/stallwatch_streams/fleet/task_state.py)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from stallwatch_streams.fleet.metrics import FleetMetrics
from stallwatch_streams.fleet.rules import IncidentRules, Outcome
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import Tally
from stallwatch_streams.fleet.task_state import IncidentTaskState, Lifecycle
from stallwatch_streams.fleet.window import WINDOW_FORMAT, new_state, readable

log = logging.getLogger("stallwatch_streams.fleet.service")  # the judge's lines, under the app's name

# A key's state in the table: its windows and open incidents (stallwatch_streams/fleet/window.py).
State = dict[str, Any]


def drop_unreadable(data: MutableMapping[bytes, Any], key: bytes, metrics: FleetMetrics) -> None:
    """A table value in a format this version does not read (a later release's): dropped from
    memory only (the changelog keeps it for the release that reads it), counted and logged, its
    (tenant, tool) judged anew from its next partials."""
    del data[key]
    metrics.unreadable.inc()
    log.warning(
        "judge: a window in a table format this version does not read (this one reads %d) "
        "dropped; its (tenant, tool) is judged anew from its next partials",
        WINDOW_FORMAT,
    )


class KeyQuota(Exception):
    """A tally of a new (tenant, tool) key past its tenant's quota: dead-lettered."""


@dataclass(frozen=True, slots=True)
class IncidentTaskContext:
    """What every task of a worker shares: the settings, the table, the rules, the metrics, and
    the worker's counts over all its tasks (the caps are per worker, not per partition)."""

    cfg: FleetSettings
    table: MutableMapping[bytes, Any]
    rules: IncidentRules
    metrics: FleetMetrics
    keys_held: Callable[[], int]
    tenant_keys_held: Callable[[str | None], int]
    open_changed: Callable[[], None]


class IncidentTask:
    """One partials partition this worker was assigned, from its assignment to its loss."""

    def __init__(self, partition: int, context: IncidentTaskContext) -> None:
        self.partition = partition
        self.context = context
        self.lifecycle = Lifecycle(partition)
        self.keys: OrderedDict[bytes, None] = OrderedDict()  # least recently updated first
        self.open_keys: set[bytes] = set()
        self.tenant_keys: dict[str | None, int] = {}

    def __repr__(self) -> str:
        return f"IncidentTask({self.partition}, {self.state.name}, {len(self.keys)} keys)"

    @property
    def state(self) -> IncidentTaskState:
        return self.lifecycle.state

    # -- its lifecycle -----------------------------------------------------------------------

    def index(self, held: Iterable[tuple[bytes, State]]) -> None:
        """Its keys as the table holds them (in the table's order), after a recovery: keys this
        worker has not touched yet are among them."""
        self.keys, self.open_keys, self.tenant_keys = OrderedDict(), set(), {}
        for key, state in held:
            self.keys[key] = None
            self._count_tenant(state.get("tenant"), 1)
            if state.get("open"):
                self.open_keys.add(key)
        self.lifecycle.to(IncidentTaskState.RUNNING)

    def suspend(self) -> None:
        """The group rebalanced and the partition stays: its keys are read again at the next
        record (a CREATED task has not been read yet and stays so)."""
        if self.state is IncidentTaskState.RUNNING:
            self.lifecycle.to(IncidentTaskState.SUSPENDED)

    def close(self) -> None:
        """Given away: its keys leave this worker's view and gauges (the table's memory store
        keeps them until the next indexing drops them; their new owner restored them)."""
        self.keys, self.open_keys, self.tenant_keys = OrderedDict(), set(), {}
        self.lifecycle.to(IncidentTaskState.CLOSED)

    # -- judging -----------------------------------------------------------------------------

    def apply(self, key: bytes, partial: Tally, clock: float) -> tuple[Outcome | None, Outcome]:
        """A partial into its key's windows: what the eviction that made room for a new key
        closed (None when the key was held), and what the partial opened, updated or closed.
        Raises KeyQuota for a new key of a tenant at its quota."""
        ctx = self.context
        ctx.metrics.partials.inc()
        state, evicted = ctx.table.get(key), None
        if state is not None and not readable(state):
            # Faust's table keeps its memory store in `data` (a plain mapping is its own).
            drop_unreadable(getattr(ctx.table, "data", ctx.table), key, ctx.metrics)
            state = None
        if state is None:
            tenant = partial["tenant"]
            held = ctx.tenant_keys_held(tenant)
            if held >= ctx.cfg.max_keys_per_tenant:
                raise KeyQuota(
                    f"its tenant already has {held:,} (tenant, tool) keys on this fleet "
                    "worker, the quota (STALLWATCH_FLEET_MAX_KEYS_PER_TENANT)"
                )
            state = new_state(tenant, partial["tool"])
            evicted = self._make_room(clock)
            self._count_tenant(tenant, 1)
        dropped, late = state["dropped"], state["late"]
        outcome = ctx.rules.apply(state, partial, clock)
        ctx.metrics.dropped.labels("cap").inc(state["dropped"] - dropped)
        ctx.metrics.dropped.labels("late").inc(state["late"] - late)
        ctx.table[key] = state
        self.keys[key] = None
        self.keys.move_to_end(key)
        self._track_open(key, state)
        return evicted, outcome

    def close_quiet(self, clock: float) -> list[Outcome]:
        """The incidents of its keys whose tools went quiet by `clock`, closed: what to publish."""
        closed = []
        for key in list(self.open_keys):
            state = self.context.table.get(key)
            if state is None:
                continue
            outcome = Outcome()
            self.context.rules.close_quiet(state, clock, outcome)
            if outcome.closed:
                self.context.table[key] = state
                self._track_open(key, state)
                closed.append(outcome)
        return closed

    def open_states(self) -> Iterator[State]:
        """The states of its keys with an open incident."""
        for key in self.open_keys:
            state = self.context.table.get(key)
            if state is not None:
                yield state

    def _make_room(self, clock: float) -> Outcome:
        """Room for a new key under the worker's cap: the least recently updated key of this
        partition without an open incident goes, or, when every one has one, the least recently
        updated, its incidents closed (what to publish is returned). So a flood of made-up tool
        names cannot close another tenant's incident while quieter keys are left to evict."""
        ctx = self.context
        closed = Outcome()
        while ctx.keys_held() >= ctx.cfg.max_keys and self.keys:
            old = next((k for k in self.keys if k not in self.open_keys), None)
            if old is None:
                old = next(iter(self.keys))
            del self.keys[old]
            self.open_keys.discard(old)
            evicted = ctx.table.get(old)
            del ctx.table[old]
            if evicted is not None:
                self._count_tenant(evicted.get("tenant"), -1)
            if evicted is not None and evicted["open"]:
                ctx.rules.close_evicted(evicted, clock, closed)
                ctx.metrics.evicted_open.inc()
            ctx.metrics.evicted.inc()
        ctx.metrics.keys.set(ctx.keys_held() + 1)
        return closed

    def _count_tenant(self, tenant: str | None, change: int) -> None:
        held = self.tenant_keys.get(tenant, 0) + change
        if held > 0:
            self.tenant_keys[tenant] = held
        else:
            self.tenant_keys.pop(tenant, None)

    def _track_open(self, key: bytes, state: State) -> None:
        if state["open"]:
            self.open_keys.add(key)
        else:
            self.open_keys.discard(key)
        self.context.open_changed()
