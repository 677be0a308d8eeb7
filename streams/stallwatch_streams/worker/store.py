"""Run states of a partition this worker owns, restored from its compacted changelog."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.quota import STORED_BYTES_FACTOR, LiveRuns, RunQuota
from stallwatch.engine.state import RunState
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings

log = logging.getLogger(__name__)

# Restore reads the changelog in large fetches: 100,000 runs of ~250 bytes are ~25 MB, and
# small fetches would make recovery a chain of round trips.
RESTORE_FETCH_BYTES = 16 * 1024 * 1024

# The changelog key of a partition's position record (the input offset its next batch starts at),
# written by every batch's transaction. Not valid UTF-8, so no run id (a JSON string, stored
# UTF-8) can ever have it as its key.
POSITION_KEY = b"\xffposition"


def encode_position(offset: int, clock: float | None = None) -> bytes:
    """The offset, then the partition clock after the batch (JSON `[offset, clock]`, the float
    exactly), so that a restore resumes the clock the commits had, not one rebuilt from whichever
    states it decodes."""
    return str(offset).encode() if clock is None else orjson.dumps([offset, clock])


def decode_position(value: bytes) -> tuple[int, float | None]:
    """(offset, clock); the format before the clock (the offset alone) gives no clock."""
    if value.startswith(b"["):
        offset, clock = orjson.loads(value)
        return int(offset), float(clock)
    return int(value), None


class PartitionStates:
    """One partition's run states by run id, its broker clock, its position and its live runs by
    tenant: its task's slice of the worker's memory. A state stays the raw changelog bytes until a
    batch first needs it, so restoring 100,000 runs costs a dict insert each, not a decode each.

    A batch's new runs are put and its expired runs deleted as it is applied, before its
    transaction commits (the next batch of the partition reads them), and the detector changes a
    loaded state in place: after a failed transaction these states hold changes Kafka does not,
    and the partition's task serves again only from states read anew from the changelog
    (`restore`; streams/stallwatch_streams/worker/task.py).
    """

    def __init__(
        self,
        raw: dict[str, bytes] | None = None,
        position: int | None = None,
        clock: float | None = None,
        quota: RunQuota | None = None,
    ) -> None:
        """From restored states (run id -> changelog bytes), position and clock (None: a position
        written before the clock was; the states decoded move it). `quota`: the limits of the
        partition's live runs (None: none)."""
        self._raw = {} if raw is None else raw
        self._decoded: dict[str, RunState] = {}
        self.clock = PartitionClock()  # the partition's broker time
        self.clock.newest = clock
        # The input offset after its last committed batch, from the changelog (None: no batch
        # committed since positions were written; the group's offset serves).
        self.position = position
        # Its live runs by tenant, kept by the batch step (stallwatch/engine/quota.py).
        self.live: LiveRuns | None = None
        if quota is not None:
            live = self.live = LiveRuns(quota)
            for run_id, stored in self._raw.items():
                try:
                    tenant, ended = RunState.tenant_and_ended(stored)
                except (ValueError, TypeError, IndexError, KeyError):
                    # Unreadable here (another version's format): counted live, and left to the
                    # batch step, which meets it inside its fault boundary when its run is loaded.
                    tenant, ended = None, False
                if not ended:
                    live.add(tenant)
                    live.charge(run_id, tenant, int(len(stored) * STORED_BYTES_FACTOR))

    def load(self, run_id: str) -> RunState | None:
        state = self._decoded.get(run_id)
        if state is None:
            raw = self._raw.pop(run_id, None)
            if raw is not None:
                state = self._decoded[run_id] = RunState.from_bytes(raw)
                self.clock.observe(state)
        return state

    def put(self, run_id: str, state: RunState) -> None:
        self._decoded[run_id] = state

    def delete(self, run_id: str) -> None:
        state = self._decoded.pop(run_id, None)
        raw = self._raw.pop(run_id, None)
        if self.live is not None:
            tenant, ended = (
                (state.tenant, state.ended)
                if state is not None
                else RunState.tenant_and_ended(raw)
                if raw is not None
                else (None, True)
            )
            if not ended:
                self.live.remove(tenant)
            self.live.discharge(run_id)

    def states(self) -> Iterator[tuple[str, RunState]]:
        """Every run of the partition, decoding the ones not yet decoded."""
        for run_id in list(self._raw):
            self.load(run_id)
        yield from list(self._decoded.items())

    def __len__(self) -> int:
        return len(self._raw) + len(self._decoded)


async def restore(
    settings: Settings, partitions: list[int], on_progress: Callable[[], None], quota: RunQuota | None = None
) -> dict[int, PartitionStates]:
    """Read the partitions' changelog from the start to its end, in one reader for them all.

    `on_progress` is called after every fetch: a long restore is progress, not a hang.
    Read committed: a state whose transaction was aborted (its worker died mid-batch) is
    never restored, so states match the committed input offsets exactly.
    """
    started = time.monotonic()
    raw: dict[int, dict[str, bytes]] = {p: {} for p in partitions}
    positions: dict[int, tuple[int, float | None]] = {}
    consumer = committed_reader(
        aiokafka_options(settings),
        fetch_max_bytes=RESTORE_FETCH_BYTES,
        max_partition_fetch_bytes=RESTORE_FETCH_BYTES,
    )

    def take(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        states = raw[tp.partition]
        for record in records:
            if record.key == POSITION_KEY:
                positions[tp.partition] = decode_position(record.value)
            elif record.value is None:
                states.pop(record.key.decode(), None)
            else:
                states[record.key.decode()] = record.value

    try:
        await consumer.start()
        tps = [TopicPartition(settings.changelog_topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await read_to_end(consumer, tps, take, max_records=100_000, on_fetch=on_progress)
    finally:
        await consumer.stop()
    restored = {}
    for partition in partitions:
        position, clock = positions.get(partition, (None, None))
        restored[partition] = PartitionStates(raw[partition], position, clock, quota)
    log.info(
        "restored %d runs of partitions %s in %.2f s",
        sum(len(r) for r in raw.values()),
        partitions,
        time.monotonic() - started,
    )
    return restored
