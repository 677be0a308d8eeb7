"""One partials partition this fleet worker judges, as a task: its (tenant, tool) keys, least
recently updated first (an evicted key's tombstone must go to its own changelog partition), those
with an open incident, and the keys and estimated bytes it holds per tenant (fleet/sizes.py),
over the windows and incidents the table keeps; made on assignment, its keys read from the table
once Faust restored it, closed when the partition is given away
(streams/stallwatch_streams/fleet/task_state.py)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from stallwatch.contract.digests import digest
from stallwatch_streams.fleet import sizes
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
    """A tally of a new (tenant, tool) key past its tenant's quota, in keys (`key_quota`) or in
    bytes (`memory_quota`): dead-lettered."""

    def __init__(self, reason: str, tenant: str | None, message: str) -> None:
        super().__init__(message)
        self.reason, self.tenant = reason, tenant


@dataclass(slots=True)
class Charge:
    """What one key is charged: its tenant, its buckets' estimated bytes (kept as partials add
    and drop them) and its whole estimate (fleet/sizes.py)."""

    tenant: str | None
    buckets: int
    total: int = 0


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
    bytes_held: Callable[[], int]
    tenant_bytes_held: Callable[[str | None], int]
    bytes_changed: Callable[[str | None, int], None]
    open_changed: Callable[[], None]
    # Keys the digests of keys in log lines, as the dead letters' (None: unkeyed).
    secret: bytes | None = None


def tenant_label(tenant: str | None) -> str:
    """A tenant as metrics name it (shared: the shared topic's runs, which name none)."""
    return "shared" if tenant is None else tenant


class IncidentTask:
    """One partials partition this worker was assigned, from its assignment to its loss."""

    def __init__(self, partition: int, context: IncidentTaskContext) -> None:
        self.partition = partition
        self.context = context
        self.lifecycle = Lifecycle(partition)
        self.evictions = 0  # keys this task evicted for a cap, since it was made
        # Every key and its charge, least recently updated first; the same per tenant; the
        # estimated bytes of its keys per tenant and in all.
        self.keys: OrderedDict[bytes, Charge] = OrderedDict()
        self.open_keys: set[bytes] = set()
        self.tenant_keys: dict[str | None, OrderedDict[bytes, None]] = {}
        self.tenant_bytes: dict[str | None, int] = {}
        self.bytes = 0

    def _forget(self) -> None:
        """Its keys out of its view, and their bytes out of the worker's counts."""
        for tenant, held in self.tenant_bytes.items():
            self.context.bytes_changed(tenant, -held)
        self.keys, self.open_keys, self.tenant_keys, self.tenant_bytes = OrderedDict(), set(), {}, {}
        self.bytes = 0

    def __repr__(self) -> str:
        return f"IncidentTask({self.partition}, {self.state.name}, {len(self.keys)} keys)"

    @property
    def state(self) -> IncidentTaskState:
        return self.lifecycle.state

    # -- its lifecycle -----------------------------------------------------------------------

    def index(self, held: Iterable[tuple[bytes, State]]) -> None:
        """Its keys as the table holds them (in the table's order), after a recovery: keys this
        worker has not touched yet are among them. Each key's buckets are counted whole here,
        once per recovery."""
        self._forget()
        for key, state in held:
            self._charge(key, state, Charge(state.get("tenant"), sizes.buckets_bytes(state)))
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
        self._forget()
        self.lifecycle.to(IncidentTaskState.CLOSED)

    # -- judging -----------------------------------------------------------------------------

    def apply(self, key: bytes, partial: Tally, clock: float) -> tuple[Outcome | None, Outcome]:
        """A partial into its key's windows: what the evictions that kept the caps closed (None
        when no key was evicted), and what the partial opened, updated or closed. Raises
        KeyQuota for a new key of a tenant at its quota in keys or in bytes."""
        ctx = self.context
        ctx.metrics.partials.inc()
        state, evicted, evictions = ctx.table.get(key), Outcome(), self.evictions
        if state is not None and not readable(state):
            # Faust's table keeps its memory store in `data` (a plain mapping is its own).
            drop_unreadable(getattr(ctx.table, "data", ctx.table), key, ctx.metrics)
            self._uncharge(key)
            state = None
        charge, new = self.keys.get(key), state is None
        if state is None:
            tenant = partial["tenant"]
            self._check_quota(tenant, ctx.tenant_bytes_held(tenant) + sizes.KEY_BYTES)
            state = new_state(tenant, partial["tool"])
            charge = Charge(tenant, 0)
        elif charge is None:  # in the table, not yet in this task's view: counted whole once
            charge = Charge(state.get("tenant"), sizes.buckets_bytes(state))
        dropped, late = state["dropped"], state["late"]
        outcome = ctx.rules.apply(state, partial, clock)
        charge.buckets += outcome.grown
        if new:
            # A new key that would take its tenant past its budget is refused whole, before
            # anything of it is kept: a flood of new keys cannot push the tenant's held keys out.
            size = sizes.key_bytes(key, state, charge.buckets)
            self._check_quota(charge.tenant, ctx.tenant_bytes_held(charge.tenant) + size)
            self._make_room(clock, evicted)
        ctx.metrics.dropped.labels("cap").inc(state["dropped"] - dropped)
        ctx.metrics.dropped.labels("late").inc(state["late"] - late)
        ctx.table[key] = state
        self._charge(key, state, charge)
        self._track_open(key, state)
        self._keep_budgets(key, charge.tenant, clock, evicted)
        ctx.metrics.keys.set(ctx.keys_held())
        return (evicted if self.evictions > evictions else None), outcome

    def _check_quota(self, tenant: str | None, held_bytes: int) -> None:
        """Raises KeyQuota when the tenant has its quota of keys, or when `held_bytes` (what its
        keys would hold with the new one) is past its budget."""
        ctx = self.context
        held = ctx.tenant_keys_held(tenant)
        if held >= ctx.cfg.max_keys_per_tenant:
            raise KeyQuota(
                "key_quota",
                tenant,
                f"its tenant already has {held:,} (tenant, tool) keys on this fleet "
                "worker, the quota (STALLWATCH_FLEET_MAX_KEYS_PER_TENANT)",
            )
        if held_bytes > ctx.cfg.max_bytes_per_tenant:
            raise KeyQuota(
                "memory_quota",
                tenant,
                f"its tenant's (tenant, tool) keys would hold {held_bytes / 2**20:,.1f} MiB on this "
                "fleet worker with this new one, past the quota "
                f"({ctx.cfg.max_bytes_per_tenant / 2**20:,.1f} MiB, "
                "STALLWATCH_FLEET_MAX_BYTES_PER_TENANT); its keys held are judged as before",
            )

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
                charge = self.keys.get(key)
                if charge is not None:
                    self._charge(key, state, charge)  # its incidents' bytes are free
                self._track_open(key, state)
                closed.append(outcome)
        return closed

    def open_states(self) -> Iterator[State]:
        """The states of its keys with an open incident."""
        for key in self.open_keys:
            state = self.context.table.get(key)
            if state is not None:
                yield state

    # -- the caps ------------------------------------------------------------------------------

    def _make_room(self, clock: float, closed: Outcome) -> None:
        """Room for a new key under the worker's cap in keys (STALLWATCH_FLEET_MAX_KEYS)."""
        ctx = self.context
        while ctx.keys_held() >= ctx.cfg.max_keys:
            victim = self._victim(self.keys, None)
            if victim is None:
                break
            self._evict(victim, clock, closed)

    def _keep_budgets(self, key: bytes, tenant: str | None, clock: float, closed: Outcome) -> None:
        """After a key grew: its tenant's keys back within its budget in bytes, then the worker's
        within STALLWATCH_FLEET_MAX_BYTES, by evicting keys of this partition (an evicted key's
        tombstone goes to its own changelog partition), never the key just judged. The tenant's
        own keys go first, so its growth costs no other tenant a key; each leaves at most this
        key's growth over a budget on this partition."""
        ctx = self.context
        while ctx.tenant_bytes_held(tenant) > ctx.cfg.max_bytes_per_tenant:
            victim = self._victim(self.tenant_keys.get(tenant, {}), key)
            if victim is None:
                break
            ctx.metrics.tenant_quota.labels(tenant_label(tenant), "evicted").inc()
            log.warning(
                "judge: tenant %s over STALLWATCH_FLEET_MAX_BYTES_PER_TENANT (%.1f MiB) as its "
                "keys grew: its least recently updated key %s evicted",
                tenant_label(tenant),
                ctx.tenant_bytes_held(tenant) / 2**20,
                key_fingerprint(victim, ctx.secret),
            )
            self._evict(victim, clock, closed)
        while ctx.bytes_held() > ctx.cfg.max_bytes:
            victim = self._victim(self.keys, key)
            if victim is None:
                break
            self._evict(victim, clock, closed)

    def _victim(self, order: Mapping[bytes, object], spared: bytes | None) -> bytes | None:
        """The least recently updated key without an open incident, or, when every one has one,
        the least recently updated: a flood of made-up tool names cannot close another tenant's
        incident while quieter keys are left to evict."""
        fallback = None
        for candidate in order:
            if candidate == spared:
                continue
            if candidate not in self.open_keys:
                return candidate
            if fallback is None:
                fallback = candidate
        return fallback

    def _evict(self, old: bytes, clock: float, closed: Outcome) -> None:
        """A key out of the table and this task; its open incidents closed into `closed`."""
        ctx = self.context
        self._uncharge(old)
        self.open_keys.discard(old)
        evicted = ctx.table.get(old)
        del ctx.table[old]
        if evicted is not None and evicted["open"]:
            ctx.rules.close_evicted(evicted, clock, closed)
            ctx.metrics.evicted_open.inc()
        ctx.metrics.evicted.inc()
        self.evictions += 1

    # -- the accounting ------------------------------------------------------------------------

    def _charge(self, key: bytes, state: State, charge: Charge) -> None:
        """The key charged its estimate now, most recently updated."""
        before = charge.total if key in self.keys else 0
        charge.total = sizes.key_bytes(key, state, charge.buckets)
        self.keys[key] = charge
        self.keys.move_to_end(key)
        lru = self.tenant_keys.setdefault(charge.tenant, OrderedDict())
        lru[key] = None
        lru.move_to_end(key)
        self._add_bytes(charge.tenant, charge.total - before)

    def _uncharge(self, key: bytes) -> None:
        charge = self.keys.pop(key, None)
        if charge is None:
            return
        lru = self.tenant_keys.get(charge.tenant)
        if lru is not None:
            lru.pop(key, None)
            if not lru:
                del self.tenant_keys[charge.tenant]
        self._add_bytes(charge.tenant, -charge.total)

    def _add_bytes(self, tenant: str | None, change: int) -> None:
        if not change:
            return
        self.bytes += change
        held = self.tenant_bytes.get(tenant, 0) + change
        if held > 0:
            self.tenant_bytes[tenant] = held
        else:
            self.tenant_bytes.pop(tenant, None)
        self.context.bytes_changed(tenant, change)

    def _track_open(self, key: bytes, state: State) -> None:
        if state["open"]:
            self.open_keys.add(key)
        else:
            self.open_keys.discard(key)
        self.context.open_changed()


def key_fingerprint(key: bytes, secret: bytes | None) -> str:
    """A key for a log line: a digest, never the tool's name."""
    return digest(key, secret).hex()[:16]
