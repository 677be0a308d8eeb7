"""A worker's pipelines by tenant, without a broker: a scan serves the tenants whose events topic
appeared and lets go of one gone at two scans in a row, a broker that does not answer the scan
changes nothing, and a pipeline's failure ends the worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from stallwatch.engine.detector import Detector
from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.progress import Progress
from stallwatch_streams.worker.tenants import Tenants


class Topics:
    """The cluster's topics as the shared pipeline's consumer lists them."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.failing = False

    async def topics(self) -> set[str]:
        if self.failing:
            raise KafkaConnectionError("the broker is away")
        return set(self.names)


class FakePipeline:
    """What Tenants uses of a Pipeline."""

    def __init__(self, settings: Settings, cluster: Topics) -> None:
        self.settings = settings
        self.consumer = cluster
        self.progress = Progress(restoring=False)
        self.runs_held = 0
        self.fingerprints = 0
        self.started = self.stopped = False
        self.fail = asyncio.Event()

    async def start(self) -> None:
        self.started = True

    async def run(self) -> None:
        await self.fail.wait()
        raise RuntimeError(f"{self.settings.tenant}'s pipeline failed")

    async def stop(self, timeout_s: float) -> bool:
        self.stopped = True
        return True


def tenants(cluster: Topics) -> tuple[Tenants, list[FakePipeline]]:
    made: list[FakePipeline] = []

    def pipeline(settings: Settings) -> Any:
        made.append(FakePipeline(settings, cluster))
        return made[-1]

    settings = Settings(topic_prefix="sw", tenant_scan_interval_s=0.1)
    return Tenants(settings, StallwatchMetrics(), Detector(), pipeline), made


async def test_a_scan_serves_each_tenant_found_and_lets_one_go_when_gone_twice():
    cluster = Topics(
        {
            "sw.events",
            "sw.tenant.acme.events",
            "sw.tenant.acme.commands",
            "sw.tenant.a.b.events",
            "other.tenant.x.events",
        }
    )
    worker, made = tenants(cluster)
    await worker.start()
    assert sorted(worker.pipelines, key=str) == [None, "acme"]
    assert worker.pipelines["acme"].settings.events_topic == "sw.tenant.acme.events"
    cluster.names.add("sw.tenant.globex.events")
    await worker.scan()
    assert set(worker.pipelines) == {None, "acme", "globex"}
    cluster.names.discard("sw.tenant.acme.events")
    await worker.scan()
    assert "acme" in worker.pipelines  # one scan may miss it
    await worker.scan()
    assert set(worker.pipelines) == {None, "globex"}
    assert [p.stopped for p in made if p.settings.tenant == "acme"] == [True]
    assert await worker.stop(1.0)


async def test_a_broker_that_does_not_answer_the_scan_changes_nothing():
    cluster = Topics({"sw.events", "sw.tenant.acme.events"})
    worker, _ = tenants(cluster)
    await worker.start()
    cluster.failing = True
    for _ in range(3):
        await worker.scan()
    assert set(worker.pipelines) == {None, "acme"}
    await worker.stop(1.0)


async def test_a_pipelines_failure_ends_the_worker_and_the_health_reads_every_pipeline():
    cluster = Topics({"sw.events", "sw.tenant.acme.events"})
    worker, made = tenants(cluster)
    await worker.start()
    acme = next(p for p in made if p.settings.tenant == "acme")
    acme.progress.restoring = True
    assert worker.progress.restoring
    acme.progress.restoring = False
    acme.progress.batches_since = lambda: [0.0]  # a batch hung since the monotonic clock's epoch
    assert worker.progress.stalled_for() > 1.0
    running = asyncio.create_task(worker.run())
    acme.fail.set()
    with pytest.raises(RuntimeError, match="acme's pipeline failed"):
        await asyncio.wait_for(running, 5)
    await worker.stop(1.0)


async def test_the_gauges_add_up_every_pipelines_counts_kept_on_the_event_loop():
    cluster = Topics({"sw.events", "sw.tenant.acme.events"})
    metrics = StallwatchMetrics()
    made: list[FakePipeline] = []

    def pipeline(settings: Settings) -> Any:
        made.append(FakePipeline(settings, cluster))
        return made[-1]

    worker = Tenants(Settings(topic_prefix="sw"), metrics, Detector(), pipeline)
    await worker.start()
    for held, fake in zip((3, 4), made, strict=True):
        fake.runs_held, fake.fingerprints = held, 10 * held
    assert metrics.registry.get_sample_value("stallwatch_active_runs") == 7
    assert metrics.registry.get_sample_value("stallwatch_fingerprints_held") == 70
    await worker.stop(1.0)


async def test_ready_once_every_tenant_found_at_the_start_is_served_and_through_later_rebalances():
    cluster = Topics({"sw.events", "sw.tenant.acme.events", "sw.tenant.globex.events"})
    worker, made = tenants(cluster)
    assert not worker.progress.ready  # nothing started: not one partition served
    await worker.start()
    assert not worker.progress.ready  # started, but no group has assigned anything yet
    for pipeline in made[:-1]:
        pipeline.progress.served = True
    assert not worker.progress.ready and worker.progress.waiting() == 1
    made[-1].progress.served = True
    assert worker.progress.ready
    made[1].progress.restoring = True  # one tenant's group rebalances: the rest are served
    cluster.names.add("sw.tenant.initech.events")
    await worker.scan()  # a tenant added later is restoring its first assignment
    assert worker.progress.ready
    await worker.stop(1.0)


async def test_the_tenants_found_at_the_start_start_together(monkeypatch: pytest.MonkeyPatch):
    names = {"sw.events"} | {f"sw.tenant.t{n}.events" for n in range(5)}
    cluster = Topics(names)
    worker, _ = tenants(cluster)
    starting = 0
    most = 0
    release = asyncio.Event()

    async def start(self: FakePipeline) -> None:
        nonlocal starting, most
        starting += 1
        most = max(most, starting)
        if most == 5:
            release.set()
        elif self.settings.tenant is not None:
            await release.wait()  # each tenant's start waits on its group until all five have begun
        starting -= 1

    monkeypatch.setattr(FakePipeline, "start", start)
    await asyncio.wait_for(worker.start(), 5)
    assert most == 5 and len(worker.pipelines) == 6
    await worker.stop(1.0)
