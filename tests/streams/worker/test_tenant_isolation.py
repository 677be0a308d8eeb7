"""One tenant's worst events cannot take another tenant's guard: while tenant B floods its topic
with events near the broker's size limit, tenant A's calls all get their verdicts, the worker
answers every liveness probe, no group rebalances, and B's runs are decided as replay decides
them. The latencies themselves are the benchmark's to print (benchmarks/tenant_isolation.py):
on a loaded machine they measure the machine."""

from __future__ import annotations

import pytest

from benchmarks.tenant_isolation import scenario

pytestmark = [pytest.mark.kafka, pytest.mark.solo]


async def test_a_tenants_flood_of_its_largest_events_leaves_another_tenants_verdicts_and_the_worker():
    figures = await scenario(flood_runs=12, calls=40)
    assert figures.worker_alive, figures.log_tail
    assert figures.timed_out == 0, (figures.flooded_ms, figures.log_tail)
    assert figures.probes > 0 and figures.probes_failed == 0, figures.log_tail
    assert figures.rebalances_during == 0, figures.log_tail
    assert figures.b_got == figures.b_expected
