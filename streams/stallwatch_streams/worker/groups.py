"""The group transaction model (STALLWATCH_TRANSACTION_MODEL=group, docs/tenants.md): tenants
hashed into STALLWATCH_TENANT_GROUPS tenant groups, each one consumer group with one consumer
and one transactional producer for all of its tenants, and one producer of commands published
ahead for the worker. A tenant keeps its own pipeline, partition tasks, states, quota and attempts;
only the clients are shared, so a worker's clients and connections do not grow with its tenants.
"""

from __future__ import annotations

import hashlib
import uuid

from aiokafka import TopicPartition

from stallwatch.engine.detector import Detector
from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.attempts import AttemptLog
from stallwatch_streams.worker.commit import AheadProducer, TransactionalProducer
from stallwatch_streams.worker.confluent.ahead import AheadPublisher
from stallwatch_streams.worker.confluent.attempts import GroupAttemptLog
from stallwatch_streams.worker.confluent.consumer import GroupConsumer
from stallwatch_streams.worker.confluent.transactions import TRANSACTION_TIMEOUT_MS, GroupTransactions
from stallwatch_streams.worker.pipeline import Pipeline
from stallwatch_streams.worker.restores import SharedRestores


class TenantGroup:
    """One tenant group: its consumer and its transactions."""

    def __init__(self, settings: Settings, index: int, process_id: str) -> None:
        group_id = f"{settings.group_id}.tenants-{index}"
        instance = f"{settings.instance_id}-{index}" if settings.instance_id else None
        self.consumer = GroupConsumer(settings, group_id, instance)
        self._commands: set[str] = set()
        self.transactions = GroupTransactions(
            settings,
            f"{group_id}.{settings.instance_id or process_id}",
            lambda: self.consumer.metadata,
            self._commands.__contains__,
            holds=self.consumer.holds,
        )

    def serve(self, tenant_settings: Settings) -> None:
        self._commands.add(tenant_settings.commands_topic)


class TenantGroups:
    """A worker's tenant groups and its one producer of commands published ahead."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        process_id = uuid.uuid4().hex[:12]
        self.groups = [TenantGroup(settings, index, process_id) for index in range(settings.tenant_groups)]
        self.ahead: AheadPublisher | None = None
        # Every tenant's changelog restores, read together when they coincide (a worker joining).
        self.restores = SharedRestores(settings)

    def attempt_log(self) -> AttemptLog:
        """The poison guard's attempts, written through librdkafka like the rest of the worker's
        writes under this model."""
        return GroupAttemptLog(self.settings)

    def of(self, tenant: str | None) -> TenantGroup:
        """A tenant's group: the same on every worker (a hash of its name)."""
        digest = hashlib.sha256((tenant or "").encode()).digest()
        return self.groups[int.from_bytes(digest[:4], "big") % len(self.groups)]

    def pipeline(
        self,
        tenant_settings: Settings,
        metrics: StallwatchMetrics,
        detector: Detector,
        attempts: AttemptLog | None,
    ) -> Pipeline:
        group = self.of(tenant_settings.tenant)
        group.serve(tenant_settings)
        if self.settings.publish_ahead and self.ahead is None:
            self.ahead = AheadPublisher(self.settings)
        transactions = group.transactions

        view = group.consumer.view(tenant_settings.events_topic)

        async def participant(partition: int) -> TransactionalProducer:
            """A task's share of the group's transactions, once the partition's offsets read
            stable: a previous owner's open transaction has ended, so the changelog read next is
            final, and a zombie's later offsets are refused by the group's generation."""
            tp = TopicPartition(tenant_settings.events_topic, partition)
            await view.committed(tp)
            return transactions.participant(tp)

        pipeline = Pipeline(
            # Every transaction carries its tasks' offsets: a successor's stable read of them
            # is what waits for a previous owner's open transaction (KIP-447).
            tenant_settings.model_copy(update={"group_offsets_interval_s": 0.0}),
            metrics,
            detector,
            consumer=view,
            start_producer=participant,
            attempts=attempts,
            ahead=self.ahead,
            replace_ahead=self._replace_ahead,
            transaction_timeout_s=TRANSACTION_TIMEOUT_MS / 1000,
            read_changelog=self.restores.restore,
        )
        # An idle tenant's loop stays parked on its view (no wake-ups), its progress the
        # group's thread's; its pipeline's failure wakes it to raise.
        view.progress = pipeline.progress
        pipeline.membership.on_failure = view.wake
        return pipeline

    async def _replace_ahead(self, broken: AheadProducer) -> AheadProducer:
        if isinstance(broken, AheadPublisher) and broken is self.ahead:
            self.ahead = AheadPublisher(self.settings)
            await broken.close()
        return self.ahead or AheadPublisher(self.settings)

    def closing(self) -> None:
        """The worker stops: its tenants' pipelines leave with their groups' consumers."""
        for group in self.groups:
            group.consumer.closing = True

    async def close(self) -> None:
        for group in self.groups:
            await group.consumer.stop()
            await group.transactions.close()
        if self.ahead is not None:
            await self.ahead.close()
