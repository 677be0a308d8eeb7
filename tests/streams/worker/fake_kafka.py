"""In-memory stand-ins for aiokafka's transactional producer and group consumer, for the pure unit
tests of the commit logic only (the integration tests use the real broker)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IllegalOperation
from aiokafka.structs import ConsumerRecord


class FakeProducer:
    """A transaction's records and offsets become `visible`/`offsets` only when it commits; a
    failure (`fail_commit`, or a raise inside the transaction) aborts it and leaves nothing.
    `fail_send`: a transaction's first send fails with it, and the producer then refuses every
    later send of the transaction, as aiokafka's does once a send failed."""

    def __init__(
        self,
        fail_commit: BaseException | None = None,
        gate: asyncio.Event | None = None,
        fail_send: BaseException | None = None,
    ) -> None:
        self.fail_commit = fail_commit
        self.fail_send = fail_send
        self.gate = gate  # when set, a commit waits for it: a batch held in flight
        self.visible: list[tuple[str, int | None, bytes | None, bytes | None]] = []
        self.offsets: dict[TopicPartition, int] = {}
        self.transactions = 0
        self.stopped = False
        self._open: list[tuple[str, int | None, bytes | None, bytes | None]] | None = None
        self._open_offsets: dict[TopicPartition, int] = {}
        self._send_failed = False

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        assert self._open is None, "one transaction at a time"
        self._open, self._open_offsets = [], {}
        self._send_failed = False
        self.transactions += 1
        try:
            yield
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_commit is not None:
                raise self.fail_commit
        except BaseException:
            self._open = None  # aborted: nothing of it is visible
            raise
        self.visible += self._open
        self.offsets.update(self._open_offsets)
        self._open = None

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[None]:
        assert self._open is not None, "send outside a transaction"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail_send is not None:
            if self._send_failed:
                raise IllegalOperation("Can't send messages while not in transaction")
            self._send_failed = True
            done.set_exception(self.fail_send)
            return done
        self._open.append((topic, partition, key, value))
        done.set_result(None)
        return done

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        assert self._open is not None
        self._open_offsets.update(offsets)

    async def stop(self) -> None:
        self.stopped = True

    def records(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        return [(key, value) for t, _, key, value in self.visible if t == topic]


class FakeConsumer:
    """Hands out the queued batches one fetch at a time, then nothing; records pauses and seeks."""

    def __init__(self, assigned: list[TopicPartition]) -> None:
        self.queued: list[dict[TopicPartition, list[ConsumerRecord]]] = []
        self.assigned = set(assigned)
        self.paused: set[TopicPartition] = set()
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.committed_offsets: dict[TopicPartition, int] = {}
        self.stopped = False

    async def getmany(self, timeout_ms: int = 0, **_: Any) -> dict[TopicPartition, list[ConsumerRecord]]:
        if self.queued:
            return self.queued.pop(0)
        # The fake's part: a fetch that finds nothing waits out its timeout, as a broker's does.
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.committed_offsets.get(tp)

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self.seeks += [(tp, 0) for tp in tps]

    def highwater(self, tp: TopicPartition) -> int | None:
        return None

    def request_rejoin(self) -> None:
        self.rejoins = getattr(self, "rejoins", 0) + 1

    def set_fetch_max_wait(self, wait_ms: int) -> None:
        self.fetch_max_wait_ms = wait_ms

    async def stop(self) -> None:
        self.stopped = True


def consumer_records(
    topic: str, partition: int, key: bytes, values: list[bytes], first_offset: int = 0
) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(topic, partition, first_offset + i, 0, 0, key, value, None, len(key), len(value), [])
        for i, value in enumerate(values)
    ]


class FakeAheadProducer:
    """The idempotent producer of commands published ahead: `sent` is what reached the topic;
    with `fail`, every send's acknowledgement raises it and nothing reaches the topic. With
    `transactional`, a send inside its open transaction is an error (ahead means before it)."""

    def __init__(self, fail: BaseException | None = None, transactional: FakeProducer | None = None) -> None:
        self.fail = fail
        self.transactional = transactional
        self.sent: list[tuple[str, int | None, bytes | None, bytes | None]] = []

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[None]:
        if self.transactional is not None:
            assert self.transactional._open is None, "published inside the batch's transaction"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail is not None:
            done.set_exception(self.fail)
        else:
            self.sent.append((topic, partition, key, value))
            done.set_result(None)
        return done

    async def stop(self) -> None:
        pass

    def records(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        return [(key, value) for t, _, key, value in self.sent if t == topic]
