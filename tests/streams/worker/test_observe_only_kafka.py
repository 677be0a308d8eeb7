"""Observe-only on a real broker: a worker serving an observed tenant publishes would-have
refusals and stops, counts them, and never refuses or stops that tenant's runs."""

from __future__ import annotations

import urllib.request

import orjson
import pytest

from stallwatch.contract.commands import encode_command
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.embedded import EmbeddedEngine
from tests.engine.test_observe_only import looping_run
from tests.kafka_harness import (
    PROBE_PREFIX,
    SETTLE_S,
    WorkerProcess,
    by_run,
    collect,
    fresh_settings,
    produce,
    run_cli,
    wait_until_serving,
)
from tests.waiting import until

pytestmark = pytest.mark.kafka


async def scrape_until(port: int, wanted: list[str], timeout_s: float = 30.0) -> str:
    """The worker's /metrics once every `wanted` line is in it (a batch is counted after its commit)."""
    text = [""]

    def counted() -> str | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text[0] = response.read().decode()
        return text[0] if all(line in text[0] for line in wanted) else None

    return await until(counted, timeout_s, lambda: f"counted {wanted}:\n{text[0]}", interval_s=0.2)


async def test_an_observed_tenants_runs_go_on_with_their_would_have_stops_published_and_counted():
    settings = fresh_settings(partitions=2)
    acme, globex = settings.for_tenant("acme"), settings.for_tenant("globex")
    watched, guarded = looping_run("watched").lines(), looping_run("guarded").lines()
    observing = EmbeddedEngine(AdminPolicy(observe_only_tenants=frozenset({"acme"})), tenant="acme")
    expected = {
        "acme": [encode_command(c) for r in observing.replay(watched) if isinstance(r, list) for c in r],
        "globex": [
            encode_command(c)
            for r in EmbeddedEngine(tenant="globex").replay(guarded)
            if isinstance(r, list)
            for c in r
        ],
    }
    worker = WorkerProcess(
        settings, env={"STALLWATCH_OBSERVE_ONLY_TENANTS": "acme", "STALLWATCH_TENANT_SCAN_INTERVAL_S": "0.5"}
    )
    try:
        await wait_until_serving(settings)
        added = run_cli(settings, "tenants", "add", "acme", "globex")
        assert added.returncode == 0, added.stderr
        for tenant in (acme, globex):
            await wait_until_serving(tenant)
        await produce(acme, watched)
        await produce(globex, guarded)
        published = {}
        for tenant in (acme, globex):
            got = await collect(
                tenant, tenant.commands_topic, len(expected[str(tenant.tenant)]), 60, settle_s=SETTLE_S
            )
            published[tenant.tenant] = {
                run: commands for run, commands in by_run(got).items() if not run.startswith(PROBE_PREFIX)
            }
        text = await scrape_until(
            worker.metrics_port,
            [
                'stallwatch_would_stops_total{code="no_new_facts",tenant="acme",tool=""} 1.0',
                'stallwatch_would_refusals_total{code="duplicate_call",tenant="acme",tool="search"} 1.0',
                'stallwatch_stops_total{code="no_new_facts"} 1.0',
            ],
        )
    finally:
        worker.stop()
    # The worker decides as the embedded engine does, each tenant on its own topic.
    assert published == {tenant: by_run(commands) for tenant, commands in expected.items()}
    observed_run = [orjson.loads(c) for c in published["acme"]["watched"]]
    assert [c["code"] for c in observed_run if c["type"] == "would_stop"] == ["no_new_facts"]
    assert {c["type"] for c in observed_run} == {"verdict", "would_nudge", "would_stop"}
    assert all(c["decision"] == "allow" for c in observed_run if c["type"] == "verdict")
    guarded_run = [orjson.loads(c) for c in published["globex"]["guarded"]]
    assert [c["code"] for c in guarded_run if c["type"] == "stop"] == ["no_new_facts"]
    observed = [line for line in text.splitlines() if line.startswith("stallwatch_would_")]
    assert observed and not [line for line in observed if 'tenant="globex"' in line]
