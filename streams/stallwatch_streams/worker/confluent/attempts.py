"""The poison guard's attempts written through librdkafka (the group model): every tenant's
write is one `produce` into the worker's one idempotent producer, whose thread sends the writes
of many tenants' batches in one request and serves their acknowledgements, where aiokafka's
producer encoded and sent each write in Python on the event loop. What a write means, and when
it is awaited, is `AttemptLog`'s (stallwatch_streams/worker/attempts.py); the reads at a
takeover stay on aiokafka."""

from __future__ import annotations

import asyncio
from typing import Any

from stallwatch.settings import Settings
from stallwatch_streams.worker.attempts import Attempt, AttemptLog
from stallwatch_streams.worker.confluent.ahead import AheadPublisher


class GroupAttemptLog(AttemptLog):
    """`AttemptLog` whose writes go through an idempotent librdkafka producer, acknowledged by
    every in-sync replica; a write waits for its partition's leader rather than expire unsent."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._publisher: AheadPublisher | None = None
        # Replaced after a failed write, kept serving the other writes' acknowledgements (each
        # of them fails or lands on its own) until the worker stops.
        self._retired: list[AheadPublisher] = []

    async def write(self, key: str, attempt: Attempt) -> None:
        """Written and acknowledged. A failed write (a fatal error of the producer) puts a fresh
        producer in its place for the caller's retry; a cancelled one changes nothing (the
        producer is every tenant's)."""
        publisher = self._publisher
        if publisher is None:
            publisher = self._publisher = AheadPublisher(self.settings)
        try:
            await (await publisher.send(self.topic, self.encode(attempt), key.encode()))
        except Exception:
            if self._publisher is publisher:
                self._publisher = None
                self._retired.append(publisher)
            raise

    def post(self, key: str, attempt: Attempt) -> bool:
        """Queued in the producer; its acknowledgement wakes nothing. A failure there (a fatal
        error of the producer, or the topic refused) fails the producer's next write too, which
        replaces it (`write`)."""
        publisher = self._publisher
        return publisher is not None and publisher.post(self.topic, self.encode(attempt), key.encode())

    def post_ahead(self, key: str, attempt: Attempt) -> asyncio.Future[Any] | None:
        """Queued in the producer, its acknowledgement's future returned. A failure there fails
        that future, and the task writes its batch's record itself (`PartitionTask.mark`)."""
        publisher = self._publisher
        return None if publisher is None else publisher.offer(self.topic, self.encode(attempt), key.encode())

    async def close(self) -> None:
        """Nothing to send on: a write not acknowledged yet let no batch be applied."""
        publishers, self._retired = [*self._retired, self._publisher], []
        self._publisher = None
        for publisher in publishers:
            if publisher is not None:
                await publisher.close(flush_s=0.0)
