"""One tenant's worst events cannot take another tenant's guard: while tenant B floods its topic
with events near the broker's size limit, tenant A's calls all get their verdicts, the worker
answers every liveness probe, no group rebalances, and B's runs are decided as replay decides
them; on the plain broker, and on the secured one with each part under its own principal and
the shipped ACLs and quotas. The latencies themselves are the benchmark's to print
(benchmarks/tenant_isolation.py): on a loaded machine they measure the machine."""

from __future__ import annotations

import pytest

from benchmarks.tenant_isolation import Deployment, Figures, scenario
from tests.security.conftest import running_secure_broker
from tests.streams.worker.faults import MODELS

pytestmark = [pytest.mark.kafka, pytest.mark.solo]


@pytest.mark.parametrize("model", MODELS)
async def test_a_tenants_flood_of_its_largest_events_leaves_another_tenants_verdicts_and_the_worker(model):
    """Under the group model B's flood (about 100 MB) also passes its view's bound of waiting
    records, so its partitions are paused and fetched again on the way."""
    # The view's bound at its least, so that B's flood passes it on any machine.
    env = {**MODELS[model], "STALLWATCH_FETCH_BUFFER_MAX_BYTES_PER_TENANT": str(1 << 20)}
    figures = await scenario(Deployment.plain(), flood_runs=12, calls=40, env=env)
    assert_isolated(figures)
    if model == "group":
        assert figures.views_held > 0, figures.log_tail


async def test_under_sasl_acls_and_quotas_a_tenants_flood_leaves_another_tenants_verdicts_and_the_worker():
    with running_secure_broker() as broker:
        figures = await scenario(Deployment.secured(broker), flood_runs=4, calls=40)
    assert_isolated(figures)


def assert_isolated(figures: Figures) -> None:
    assert figures.worker_alive, figures.log_tail
    assert figures.timed_out == 0, (figures.flooded_ms, figures.log_tail)
    assert figures.probes > 0 and figures.probes_failed == 0, figures.log_tail
    assert figures.rebalances_during == 0, figures.log_tail
    assert figures.b_expected and figures.b_got == figures.b_expected
