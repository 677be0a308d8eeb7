"""The fleet app's incident tasks, no broker: one per partials partition, made on assignment, their
keys read from the table, closed when the partition is given away; the key cap and the tenant
quota counted over every task of the worker."""

from __future__ import annotations

from typing import Any

import pytest

from stallwatch_streams.fleet.metrics import FleetMetrics
from stallwatch_streams.fleet.rules import IncidentRules
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from stallwatch_streams.fleet.task import KeyQuota
from stallwatch_streams.fleet.task_state import IncidentTaskState, InvalidTransition
from stallwatch_streams.fleet.tasks import IncidentTasks, partition_of
from tests.streams.fleet.harness import tally

PARTITIONS = 2
T0 = 1_800_000_000.0


def tools_of(partition: int, count: int, tenant: str = "acme") -> list[str]:
    """Tool names whose (tenant, tool) key lands on `partition`."""
    found, n = [], 0
    while len(found) < count:
        if partition_of(tally_key(tenant, f"tool-{n}"), PARTITIONS) == partition:
            found.append(f"tool-{n}")
        n += 1
    return found


def failing(tool: str, tenant: str = "acme") -> list[dict[str, Any]]:
    """Five runs failing on the tool: enough to open tool_failing."""
    return [tally(tool, T0 + i, tenant=tenant, runs=[f"r{i}"], calls=1, failures=1) for i in range(5)]


def healthy(tool: str, tenant: str = "acme") -> dict[str, Any]:
    return tally(tool, T0, tenant=tenant, runs=["r0"], calls=1)


class Worker:
    """The tasks of one worker over a plain dict for the table, as the service drives them."""

    def __init__(self, **settings: Any) -> None:
        self.table: dict[bytes, Any] = {}
        self.metrics = FleetMetrics()
        self.tasks = IncidentTasks(
            FleetSettings(**settings), self.table, IncidentRules(FleetSettings()), self.metrics
        )

    def assign(self, *partitions: int) -> None:
        self.tasks.assigned(set(partitions))
        self.tasks.index(self.table, set(partitions), PARTITIONS)

    def apply(self, tool: str, partial: dict[str, Any]) -> Any:
        key = tally_key(partial["tenant"], tool)
        return self.tasks.for_record(partition_of(key, PARTITIONS)).apply(key, partial, 0.0)

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def test_a_task_is_made_on_assignment_read_from_the_table_and_closed_when_given_away() -> None:
    worker = Worker()
    (tool,) = tools_of(1, 1)
    worker.assign(0, 1)
    for partial in failing(tool):
        worker.apply(tool, partial)
    task = worker.tasks.get(1)
    assert task is not None and task.state is IncidentTaskState.RUNNING
    assert task.open_keys == {tally_key("acme", tool)}
    assert worker.gauge("stallwatch_fleet_incidents_open", kind="tool_failing") == 1

    worker.tasks.assigned({0})  # partition 1 given away: out of the view at once
    assert task.state is IncidentTaskState.CLOSED and worker.tasks.get(1) is None
    assert worker.gauge("stallwatch_fleet_incidents_open", kind="tool_failing") == 0
    assert not worker.tasks.indexed
    worker.tasks.index(worker.table, {0}, PARTITIONS)
    assert worker.table == {}, "the given-away partition's keys stay in the memory store"

    with pytest.raises(InvalidTransition):
        task.index(())


def test_a_kept_partition_is_suspended_by_a_rebalance_and_read_again_with_its_open_incidents() -> None:
    worker = Worker()
    (open_tool, quiet_tool) = tools_of(0, 2)
    worker.assign(0)
    for partial in failing(open_tool):
        worker.apply(open_tool, partial)
    worker.apply(quiet_tool, healthy(quiet_tool))
    worker.tasks.assigned({0, 1})
    kept, made = worker.tasks.get(0), worker.tasks.get(1)
    assert kept is not None and kept.state is IncidentTaskState.SUSPENDED
    assert made is not None and made.state is IncidentTaskState.CREATED
    worker.tasks.index(worker.table, {0, 1}, PARTITIONS)
    assert kept.state is IncidentTaskState.RUNNING and made.state is IncidentTaskState.RUNNING
    assert list(kept.keys) == [tally_key("acme", open_tool), tally_key("acme", quiet_tool)]
    assert kept.open_keys == {tally_key("acme", open_tool)} and worker.tasks.tenant_keys_held("acme") == 2
    assert not made.keys


def test_the_key_cap_counts_every_task_and_evicts_within_the_partition_sparing_open_incidents() -> None:
    worker = Worker(max_keys=3)
    worker.assign(0, 1)
    first, second, third = tools_of(0, 3)
    (other,) = tools_of(1, 1)
    for partial in failing(first):
        worker.apply(first, partial)
    worker.apply(second, healthy(second))
    worker.apply(other, healthy(other))  # the worker's third key, on the other partition
    evicted, _ = worker.apply(third, healthy(third))
    # The quiet key goes, not the older one with an open incident, nor the other partition's.
    assert tally_key("acme", second) not in worker.table
    assert {tally_key("acme", t) for t in (first, third, other)} <= worker.table.keys()
    assert evicted is not None and not evicted.closed
    assert worker.gauge("stallwatch_fleet_tracked_keys") == 3


def test_a_tenants_quota_counts_its_keys_on_every_partition_of_the_worker() -> None:
    worker = Worker(max_keys_per_tenant=2)
    worker.assign(0, 1)
    (on_0,), (on_1,) = tools_of(0, 1), tools_of(1, 1)
    worker.apply(on_0, healthy(on_0))
    worker.apply(on_1, healthy(on_1))
    (third,) = tools_of(0, 2)[1:]
    with pytest.raises(KeyQuota, match="already has 2"):
        worker.apply(third, healthy(third))
    (elsewhere,) = tools_of(0, 1, tenant="globex")
    worker.apply(elsewhere, healthy(elsewhere, tenant="globex"))  # another tenant is spared
    assert tally_key("globex", elsewhere) in worker.table
