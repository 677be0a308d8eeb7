"""The fleet app's memory per tenant in bytes, no broker: each key's estimate kept as partials
change it (equal to the key counted whole, close to what tracemalloc measures), a tenant's new
keys refused at its budget while its held keys and the other tenants' go on, its own keys
evicted as they grow past it, the worker's budget, and the per-tenant gauge."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import orjson
import pytest

from stallwatch_streams.fleet import sizes
from stallwatch_streams.fleet.rules import IncidentRules
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from stallwatch_streams.fleet.task import KeyQuota
from stallwatch_streams.fleet.tasks import IncidentTasks, partition_of
from tests.streams.fleet.test_tasks import PARTITIONS, T0, Worker, failing, healthy, tools_of

STEP = 60.0  # FleetSettings' default step: a bucket a minute
BUDGET = 256 << 10


def whole(worker: Worker, key: bytes) -> int:
    """The key's estimate counted whole from its state in the table."""
    state = worker.table[key]
    return sizes.key_bytes(key, state, sizes.buckets_bytes(state))


def charged(worker: Worker, key: bytes) -> int:
    task = worker.tasks.get(partition_of(key, PARTITIONS))
    assert task is not None
    return task.keys[key].total


def busy(tool: str, minute: int, tenant: str = "acme", runs: int = 8, answers: int = 4) -> dict[str, Any]:
    """A partial of `runs` runs with long ids and `answers` answers, in the bucket of `minute`."""
    ids = [f"{tenant}-{tool}-{minute}-{i}".ljust(100, "x") for i in range(runs)]
    found = [{"fingerprint": f"{i:032x}", "runs": ids, "args": [f"{i + 1:032x}"]} for i in range(answers)]
    return {
        "v": 1,
        "tenant": tenant,
        "tool": tool,
        "ts": T0 + minute * STEP,
        "calls": runs,
        "failures": 0,
        "runs": ids,
        "stops": ids[:2],
        "answers": found,
        "dropped": 0,
    }


def test_a_keys_estimate_kept_step_by_step_equals_the_key_counted_whole() -> None:
    worker = Worker()
    worker.assign(0, 1)
    (tool,) = tools_of(0, 1)
    key = tally_key("acme", tool)
    # Thirty minutes: buckets made, filled again with ids held (no growth), dropped as stale.
    for minute in range(30):
        for _ in range(2):
            worker.apply(tool, busy(tool, minute))
        assert charged(worker, key) == whole(worker, key), f"minute {minute}"
    assert len(worker.table[key]["buckets"]) == 11, "stale buckets were dropped"
    # Incidents opened (five failing runs) and closed (a quiet window later) are counted too.
    for partial in failing(tool):
        partial["ts"] = T0 + 31 * STEP
        worker.apply(tool, partial)
    assert worker.table[key]["open"] and charged(worker, key) == whole(worker, key)
    worker.apply(tool, busy(tool, 50))
    assert not worker.table[key]["open"] and charged(worker, key) == whole(worker, key)
    assert worker.tasks.tenant_bytes_held("acme") == charged(worker, key)


def test_the_estimate_is_what_a_restart_reads_and_the_gauge_shows_it() -> None:
    worker = Worker()
    worker.assign(0, 1)
    for tool in tools_of(0, 3) + tools_of(1, 2):
        for minute in range(3):
            worker.apply(tool, busy(tool, minute))
    held = worker.tasks.tenant_bytes_held("acme")
    assert worker.gauge("stallwatch_fleet_state_bytes", tenant="acme") == held
    # A restart: the table as the changelog gives it back, read by a new worker.
    restored = Worker()
    restored.table.update({k: orjson.loads(orjson.dumps(v)) for k, v in worker.table.items()})
    restored.assign(0, 1)
    assert restored.tasks.tenant_bytes_held("acme") == held
    restored.tasks.assigned({0})  # partition 1 given away: its bytes leave the gauge
    kept = restored.tasks.get(0)
    assert kept is not None and restored.tasks.bytes_held() == kept.bytes
    assert 0 < restored.gauge("stallwatch_fleet_state_bytes", tenant="acme") == kept.bytes < held
    restored.tasks.assigned(set())
    assert restored.gauge("stallwatch_fleet_state_bytes", tenant="acme") is None


@pytest.mark.parametrize("digests", ["32 hex digits", "128 characters"])
def test_the_estimate_of_a_key_at_its_caps_is_within_a_tenth_of_what_tracemalloc_measures(
    digests: str,
) -> None:
    from benchmarks.fleet_key_bytes import at_caps, at_caps_long, measure_bytes

    shape = at_caps if digests == "32 hex digits" else at_caps_long
    estimated, live, restored = measure_bytes(shape, 2)
    assert 0.9 < estimated / live < 1.1 and 0.9 < estimated / restored < 1.1, (estimated, live, restored)


def test_a_tenant_at_its_budget_gets_its_new_keys_refused_its_held_keys_and_the_others_go_on() -> None:
    worker = Worker(max_bytes_per_tenant=BUDGET)
    worker.assign(0, 1)
    tools = tools_of(0, 100)
    held, refused = [], None
    for tool in tools:
        try:
            worker.apply(tool, busy(tool, 0))
        except KeyQuota as error:
            refused = (tool, error)
            break
        held.append(tool)
    assert refused is not None, "the budget was reached"
    tool, error = refused
    assert (error.reason, error.tenant) == ("memory_quota", "acme")
    assert "STALLWATCH_FLEET_MAX_BYTES_PER_TENANT" in str(error) and tool not in str(error)
    assert tally_key("acme", tool) not in worker.table
    assert len(held) > 10 and worker.tasks.tenant_bytes_held("acme") <= BUDGET
    # The tenant's held keys are judged as before: an incident opens on one of them.
    for partial in failing(held[0]):
        partial["ts"] += 10 * STEP  # a window after the busy minute
        worker.apply(held[0], partial)
    assert worker.table[tally_key("acme", held[0])]["open"]
    # Another tenant's new key on the same worker is taken.
    (other,) = tools_of(0, 1, tenant="globex")
    worker.apply(other, busy(other, 0, tenant="globex"))
    assert tally_key("globex", other) in worker.table


class Deletions(dict[bytes, Any]):
    """A table that remembers the keys deleted from it, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[bytes] = []

    def __delitem__(self, key: bytes) -> None:
        self.deleted.append(key)
        super().__delitem__(key)


def test_a_tenants_keys_growing_past_its_budget_evict_its_own_quiet_keys_first() -> None:
    worker = Worker(max_bytes_per_tenant=BUDGET)
    worker.table = table = Deletions()
    worker.tasks = IncidentTasks(
        FleetSettings(max_bytes_per_tenant=BUDGET), table, IncidentRules(FleetSettings()), worker.metrics
    )
    worker.assign(0, 1)
    (victim_tool,) = tools_of(0, 1, tenant="globex")
    worker.apply(victim_tool, busy(victim_tool, 0, tenant="globex"))
    tools = tools_of(0, 6)
    for tool in tools:
        worker.apply(tool, healthy(tool))  # small keys, well within the budget
    for partial in failing(tools[0]):
        worker.apply(tools[0], partial)  # an open incident: spared while quiet keys are left
    growing = tally_key("acme", tools[-1])
    for minute in range(20):  # the last key grows, bucket by bucket
        worker.apply(tools[-1], busy(tools[-1], minute, runs=40, answers=16))
        assert worker.tasks.tenant_bytes_held("acme") <= BUDGET + whole(worker, growing)
    quiet = [tally_key("acme", t) for t in tools[1:-1]]
    assert table.deleted[: len(quiet)] == quiet, "the least recently updated quiet keys first"
    assert table.deleted[len(quiet) :] in ([], [tally_key("acme", tools[0])]), "then the open one"
    assert growing in table, "never the key just judged"
    assert tally_key("globex", victim_tool) in table, "no other tenant's key is touched"
    assert worker.gauge("stallwatch_fleet_tenant_quota_total", tenant="acme", outcome="evicted") == len(
        table.deleted
    )
    assert worker.gauge("stallwatch_fleet_tenant_quota_total", tenant="globex", outcome="evicted") is None


def test_the_workers_budget_evicts_the_least_recently_updated_keys_of_the_partition() -> None:
    worker = Worker(max_bytes=BUDGET)
    worker.assign(0, 1)
    tools = tools_of(0, 30)
    for minute, tool in enumerate(tools):
        worker.apply(tool, busy(tool, minute % 5, tenant=f"t{minute % 3}", runs=30))
    assert worker.tasks.bytes_held() <= BUDGET
    assert tally_key(f"t{29 % 3}", tools[-1]) in worker.table
    assert tally_key("t0", tools[0]) not in worker.table
    assert worker.gauge("stallwatch_fleet_evicted_keys_total") > 0


def test_the_accounting_holds_no_key_it_does_not_charge() -> None:
    worker = Worker(max_keys=5)
    worker.assign(0, 1)
    for tool in tools_of(0, 12) + tools_of(1, 12):
        worker.apply(tool, busy(tool, 0))
    gc.collect()
    charged_keys = {k for task in worker.tasks for k in task.keys}
    assert charged_keys == set(worker.table)
    assert worker.tasks.bytes_held() == sum(whole(worker, k) for k in worker.table)


def test_tracemalloc_is_left_as_found() -> None:
    assert not tracemalloc.is_tracing()
