"""Every tenant's pipeline in one worker process.

The shared topics (`{prefix}.events`, a one-team deployment) have a pipeline from the start;
each tenant whose topics exist (`stallwatch tenants add`) gets one of its own as soon as a scan
finds its events topic: its own consumer group, run states, producers and quota, so that one
tenant's rebalance, poison record or flood never pauses another's partitions, and the tenant
of every run is the one its topic names. A tenant whose events topic is deleted is let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from aiokafka.errors import KafkaError

from stallwatch.contract.faults import fault
from stallwatch.engine.detector import Detector
from stallwatch.kafka.topics import tenants_in
from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.attempts import AttemptLog
from stallwatch_streams.worker.groups import TenantGroups
from stallwatch_streams.worker.pipeline import Pipeline
from stallwatch_streams.worker.progress import AllProgress

log = logging.getLogger(__name__)

PipelineFactory = Callable[[Settings], Pipeline]
# Pipelines started at once: each start is a few round trips to the broker and its group's
# coordinator, so many overlap well; the bound keeps a worker with hundreds of tenants from
# opening every connection in the same instant.
TENANT_STARTS_AT_ONCE = 32


class Tenants:
    """The pipelines of one worker, by tenant (None: the shared topics), each run as a task; the
    first to fail ends `run`, and so the worker, which restarts from what Kafka committed."""

    def __init__(
        self,
        settings: Settings,
        metrics: StallwatchMetrics,
        detector: Detector,
        pipeline: PipelineFactory | None = None,
    ) -> None:
        self.settings = settings.for_tenant(None)
        self.metrics = metrics
        # The group model's shared clients (None: a consumer group and producers per tenant).
        self.groups = TenantGroups(self.settings) if settings.transaction_model == "group" else None
        groups = self.groups
        # Every pipeline's, on one producer (None: STALLWATCH_POISON_GUARD off).
        self.attempts: AttemptLog | None = None
        if settings.poison_guard:
            self.attempts = groups.attempt_log() if groups is not None else AttemptLog(self.settings)
        if pipeline is not None:
            self._pipeline = pipeline
        elif groups is not None:
            self._pipeline = lambda tenant_settings: groups.pipeline(
                tenant_settings, metrics, detector, self.attempts
            )
        else:
            self._pipeline = lambda tenant_settings: Pipeline(
                tenant_settings, metrics, detector, attempts=self.attempts
            )
        self.pipelines: dict[str | None, Pipeline] = {}
        self._runs: dict[str | None, asyncio.Task[None]] = {}
        self._missing: set[str] = set()  # tenants whose events topic the last scan did not find
        self.progress = AllProgress(lambda: [p.progress for p in self.pipelines.values()])
        # Read from the metrics server's thread: counts the event loop keeps, never the stores.
        metrics.active_runs.set_function(lambda: sum(p.live_runs for p in list(self.pipelines.values())))
        metrics.fingerprints.set_function(lambda: sum(p.fingerprints for p in list(self.pipelines.values())))

    async def start(self) -> None:
        """The shared topics' pipeline, then every tenant's found now, started together; the
        worker is ready once each has served its first assignment (`AllProgress.ready`)."""
        await self._add(None)
        await self.scan()
        self.progress.started = True

    async def run(self) -> None:
        """Until cancelled: the pipelines run, and new tenants are looked for every
        STALLWATCH_TENANT_SCAN_INTERVAL_S. A pipeline's failure propagates."""
        while True:
            done, _ = await asyncio.wait(
                set(self._runs.values()),
                timeout=self.settings.tenant_scan_interval_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in done:
                task.result()  # a failure raises here; a pipeline's run never returns otherwise
            await self.scan()

    async def scan(self) -> None:
        """Start the pipelines of tenants whose events topic appeared; stop those whose went. A
        broker that does not answer (restarting, cut off) leaves the pipelines as they are: the
        next scan looks again, and the pipelines ride out the outage on their own."""
        try:
            topics = await self._topics()
        except (TimeoutError, KafkaError, OSError) as exc:
            log.debug("the scan for tenants' topics failed (%s); looking again later", fault(exc))
            return
        found = tenants_in(self.settings, topics)
        await self._add_all(sorted(found - self.pipelines.keys()))
        missing = {t for t in self.pipelines.keys() - found if t is not None}
        # Gone at two scans in a row: one answer that misses a topic must not restart a tenant.
        for gone in sorted(missing & self._missing):
            log.info("tenant %s: its events topic is gone; letting its partitions go", gone)
            await self._remove(gone)
        self._missing = missing - self._missing

    async def stop(self, timeout_s: float) -> bool:
        """Every pipeline stopped at once, within `timeout_s`; False when any abandoned a batch."""
        if self.groups is not None:
            self.groups.closing()
        for task in self._runs.values():
            task.cancel()
        for task in self._runs.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        stopped = await asyncio.gather(*(p.stop(timeout_s) for p in self.pipelines.values()))
        if self.groups is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.groups.close(), timeout_s)
        if self.attempts is not None:
            # Each write was awaited before the apply it guards; one still under way (a release the
            # broker held) is given up with the producer.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.attempts.close(), timeout_s)
        return all(stopped)

    async def _topics(self) -> set[str]:
        return await asyncio.wait_for(
            self.pipelines[None].consumer.topics(), self.settings.tenant_scan_interval_s
        )

    async def _add_all(self, tenants: Sequence[str | None]) -> None:
        """Start these tenants' pipelines, up to TENANT_STARTS_AT_ONCE at a time: a pipeline's
        start waits on its group's coordinator, so one at a time makes a worker's start (and a
        second worker's join) as long as the sum of every tenant's."""
        limit = asyncio.Semaphore(TENANT_STARTS_AT_ONCE)

        async def add(tenant: str | None) -> None:
            async with limit:
                await self._add(tenant)

        await asyncio.gather(*(add(tenant) for tenant in tenants))

    async def _add(self, tenant: str | None) -> None:
        pipeline = self._pipeline(self.settings.for_tenant(tenant))
        await pipeline.start()
        self.pipelines[tenant] = pipeline
        self._runs[tenant] = asyncio.create_task(
            pipeline.run(), name=f"stallwatch-pipeline-{tenant or 'shared'}"
        )
        if tenant is not None:
            log.info("tenant %s: serving its events topic %s", tenant, pipeline.settings.events_topic)

    async def _remove(self, tenant: str) -> None:
        task = self._runs.pop(tenant)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self.pipelines.pop(tenant).stop(self.settings.tenant_scan_interval_s)
        with contextlib.suppress(KeyError):  # never set when no batch was committed
            self.metrics.state_bytes.remove(tenant)
        with contextlib.suppress(KeyError):  # never counted when no batch was applied
            self.metrics.apply_cpu.remove(tenant)
