"""This fleet worker's incident tasks, one per partials partition it holds: made on assignment,
closed when the partition is given away, their keys read from the table at the judge's first
record after a rebalance (Faust's recovery runs in between)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

from aiokafka.partitioner import murmur2

from stallwatch.contract.incidents import INCIDENT_KINDS
from stallwatch_streams.fleet.metrics import FleetMetrics
from stallwatch_streams.fleet.rules import IncidentRules
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.task import (
    IncidentTask,
    IncidentTaskContext,
    State,
    drop_unreadable,
    tenant_label,
)
from stallwatch_streams.fleet.window import readable

log = logging.getLogger("stallwatch_streams.fleet.service")  # the judge's lines, under the app's name


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the producer's default partitioner gives a key (murmur2, as Kafka's)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class IncidentTasks:
    """The tasks by partition, and the worker-wide counts (keys and estimated bytes, in all
    and per tenant) their caps are checked against."""

    def __init__(
        self,
        cfg: FleetSettings,
        table: MutableMapping[bytes, Any],
        rules: IncidentRules,
        metrics: FleetMetrics,
        secret: bytes | None = None,
    ) -> None:
        self.metrics = metrics
        self.context = IncidentTaskContext(
            cfg,
            table,
            rules,
            metrics,
            keys_held=self.keys_held,
            tenant_keys_held=self.tenant_keys_held,
            bytes_held=self.bytes_held,
            tenant_bytes_held=self.tenant_bytes_held,
            bytes_changed=self.add_bytes,
            open_changed=self.count_open,
            secret=secret,
        )
        self._tasks: dict[int, IncidentTask] = {}
        # False from the start and from each rebalance until the tasks' keys are read again.
        self.indexed = False
        # The tasks' estimated bytes, in all and per tenant, kept as they change (the budgets
        # read them at every partial), and the bytes gauge's series per tenant shown.
        self.held_bytes = 0
        self.bytes_by_tenant: dict[str | None, int] = {}
        self.gauges: dict[str | None, Any] = {}

    def __iter__(self) -> Iterator[IncidentTask]:
        return iter(self._tasks.values())

    def get(self, partition: int) -> IncidentTask | None:
        return self._tasks.get(partition)

    def for_record(self, partition: int) -> IncidentTask:
        """The task a partial of this partition is judged by: a record fetched for a partition
        this worker was not told it holds is judged as any other, by a task made for it then."""
        task = self._tasks.get(partition)
        if task is None:
            task = self._task(partition)
            task.index(())
        return task

    # -- the group's doing -------------------------------------------------------------------

    def assigned(self, held: set[int]) -> None:
        """The group's new assignment: tasks of partitions given away are closed (their keys leave
        the view and the gauges now: the keys are only read again at the judge's next record,
        which may come late, and the view meanwhile listed incidents another worker now owns);
        tasks of new partitions are made, and every task waits to be read at that record."""
        self.indexed = False
        self._close_all_but(held)
        for partition in held:
            self._task(partition).suspend()
        self.metrics.keys.set(self.keys_held())
        self.count_open()
        self.recount_bytes()

    def index(self, data: MutableMapping[bytes, State | None], held: set[int], partitions: int) -> None:
        """After a recovery the table holds keys this worker has not touched yet: each held
        partition's task reads its keys, in the table's order. Faust's memory store keeps a
        given-away partition's keys: dropped from memory only (no tombstone), their new owner
        restored them from the changelog."""
        self._close_all_but(held)
        found: dict[int, list[tuple[bytes, State]]] = {p: [] for p in held}
        dropped = 0
        for key, state in list(data.items()):
            if state is not None and not readable(state):
                drop_unreadable(data, key, self.metrics)
                continue
            partition = partition_of(key, partitions)
            if state is None or partition not in held:
                del data[key]
                dropped += 1
                continue
            found[partition].append((key, state))
        for partition, keys in found.items():
            task = self._task(partition)
            task.suspend()  # a task read before is read again
            task.index(keys)
        self.indexed = True
        kept = self.keys_held()
        self.metrics.keys.set(kept)
        self.recount_bytes()
        # Once per rebalance: a lost window after a restart reads here as kept 0 or as dropped.
        log.info(
            "judge: %d keys held on partitions %s after the rebalance, %d dropped",
            kept,
            sorted(held),
            dropped,
        )

    def _task(self, partition: int) -> IncidentTask:
        task = self._tasks.get(partition)
        if task is None:
            task = self._tasks[partition] = IncidentTask(partition, self.context)
        return task

    def _close_all_but(self, held: set[int]) -> None:
        for partition in [p for p in self._tasks if p not in held]:
            self._tasks.pop(partition).close()

    # -- counts over every task --------------------------------------------------------------

    def keys_held(self) -> int:
        return sum(len(task.keys) for task in self._tasks.values())

    def tenant_keys_held(self, tenant: str | None) -> int:
        return sum(len(task.tenant_keys.get(tenant, ())) for task in self._tasks.values())

    def bytes_held(self) -> int:
        return self.held_bytes

    def tenant_bytes_held(self, tenant: str | None) -> int:
        return self.bytes_by_tenant.get(tenant, 0)

    def add_bytes(self, tenant: str | None, change: int) -> None:
        """A task's key of `tenant` changed by `change` bytes."""
        self.held_bytes += change
        held = self.bytes_by_tenant.get(tenant, 0) + change
        if held > 0:
            self.bytes_by_tenant[tenant] = held
        else:
            self.bytes_by_tenant.pop(tenant, None)
        self._show(tenant, held)

    def recount_bytes(self) -> None:
        """The totals and the gauge from the tasks' own counts, after the tasks changed (a
        rebalance, a recovery)."""
        totals: dict[str | None, int] = {}
        for task in self._tasks.values():
            for tenant, held in task.tenant_bytes.items():
                totals[tenant] = totals.get(tenant, 0) + held
        self.held_bytes, self.bytes_by_tenant = sum(totals.values()), totals
        for tenant in set(self.gauges) | set(totals):
            self._show(tenant, totals.get(tenant, 0))

    def _show(self, tenant: str | None, held: int) -> None:
        """One tenant's series of the bytes gauge; a tenant holding none leaves the gauge."""
        gauge = self.gauges.get(tenant)
        if held > 0:
            if gauge is None:
                gauge = self.gauges[tenant] = self.metrics.state_bytes.labels(tenant_label(tenant))
            gauge.set(held)
        elif gauge is not None:
            del self.gauges[tenant]
            self.metrics.state_bytes.remove(tenant_label(tenant))

    def count_open(self) -> None:
        """The open-incidents gauge, by kind, over every task's keys."""
        held = [state.get("open", {}) for task in self._tasks.values() for state in task.open_states()]
        for kind in INCIDENT_KINDS:
            self.metrics.open.labels(kind).set(sum(kind in incidents for incidents in held))
