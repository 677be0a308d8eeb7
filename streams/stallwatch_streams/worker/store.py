"""Run states of a partition this worker owns, restored from its compacted changelog."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.quota import STORED_BYTES_FACTOR, LiveRuns, RunQuota
from stallwatch.engine.state import READABLE_FORMATS, RunState, stored_format
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
# Keys of the same kind (not UTF-8, so never a run's) that a later release may write: skipped,
# so that this version reads the changelog of the release after it.
CONTROL_KEY_PREFIX = b"\xff"


class UnreadablePosition(ValueError):
    """A partition's position record in a shape this version does not read: the partition is
    refused before it is taken, since serving it from a guessed offset could apply events twice
    or skip them."""

    def __init__(self, partition: int) -> None:
        super().__init__(
            f"partition {partition}'s position record (changelog key \\xffposition) is in a format "
            "this version does not read: run the release that wrote it, or the one after it "
            '(docs/operations.md, "Upgrading and rolling back")'
        )


def encode_position(offset: int, clock: float | None = None) -> bytes:
    """The offset, then the partition clock after the batch (JSON `[offset, clock]`, the float
    exactly), so that a restore resumes the clock the commits had, not one rebuilt from whichever
    states it decodes. Position format 1; the offset alone is format 0."""
    return str(offset).encode() if clock is None else orjson.dumps([offset, clock])


def decode_position(value: bytes) -> tuple[int, float | None]:
    """(offset, clock); format 0 (the offset alone) gives no clock. Values after the clock are a
    later release's additions, which leave these two as they are, and are ignored. Anything else
    raises ValueError."""
    if value.startswith(b"["):
        fields = orjson.loads(value)
        offset, clock = fields[0], fields[1]
        if type(offset) is not int or not isinstance(clock, int | float):
            raise ValueError("not an offset and a clock")
        return offset, float(clock)
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
        # Runs whose stored state this version does not read, by the format found (None: no
        # format at all): rebuilt from the events topic or quarantined before the partition is
        # served (stallwatch_streams/worker/rebuild.py).
        self.unreadable: dict[str, int | None] = {}
        self._decoded: dict[str, RunState] = {}
        self.clock = PartitionClock()  # the partition's broker time
        self.clock.newest = clock
        # The input offset after its last committed batch, from the changelog (None: no batch
        # committed since positions were written; the group's offset serves).
        self.position = position
        # Its live runs by tenant, kept by the batch step (stallwatch/engine/quota.py).
        self.live: LiveRuns | None = None
        # Fingerprints held by the restored runs, counted on the way: the gauge is right from
        # the start, before the expiry scan counts them again.
        self.restored_fingerprints = 0
        live = self.live = LiveRuns(quota) if quota is not None else None
        for run_id, stored in self._raw.items():  # one pass: a restore reads every run once
            found = stored_format(stored)
            if found not in READABLE_FORMATS:
                self.unreadable[run_id] = found
                if live is not None:
                    live.add(None)  # counted live under no tenant, never a place freed unread
                    live.charge(run_id, None, int(len(stored) * STORED_BYTES_FACTOR))
                continue
            if live is None:
                continue
            try:
                tenant, ended, fingerprints = RunState.summary(stored)
            except (ValueError, TypeError, IndexError, KeyError):
                # Readable format, broken content: counted live, and left to the batch step,
                # which meets it inside its fault boundary when its run is loaded.
                tenant, ended, fingerprints = None, False, 0
            self.restored_fingerprints += fingerprints
            if not ended:
                live.add(tenant)
                live.charge(run_id, tenant, int(len(stored) * STORED_BYTES_FACTOR))

    def load(self, run_id: str) -> RunState | None:
        state = self._decoded.get(run_id)
        if state is None:
            raw = self._raw.pop(run_id, None)
            if raw is not None:
                self.unreadable.pop(run_id, None)  # read now, or raises UnreadableState for its run
                state = self._decoded[run_id] = RunState.from_bytes(raw)
                self.clock.observe(state)
        return state

    def put(self, run_id: str, state: RunState) -> None:
        self._decoded[run_id] = state

    def replace_unreadable(self, run_id: str, state: RunState) -> None:
        """An unreadable stored state's run, rebuilt or quarantined: held as `state` from now on
        (and written with the partition's next commit that touches the run)."""
        if self._raw.pop(run_id, None) is not None and self.live is not None:
            self.live.remove(None)  # counted under no tenant, unread
            if not state.ended:
                self.live.add(state.tenant)
        self.unreadable.pop(run_id, None)
        self._decoded[run_id] = state
        self.clock.observe(state)

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
        """Every run of the partition, decoding the ones not yet decoded; not those this version
        cannot read, which wait for their run's next event (`RecordApplier.apply`)."""
        for run_id in list(self._raw):
            if run_id not in self.unreadable:
                self.load(run_id)
        yield from list(self._decoded.items())

    def __len__(self) -> int:
        return len(self._raw) + len(self._decoded)


# How a pipeline reads its partitions' states: `restore`, or the worker's restores shared by its
# tenants (stallwatch_streams/worker/restores.py, the group model).
ReadChangelog = Callable[
    [Settings, list[int], Callable[[], None], RunQuota | None], Awaitable[dict[int, "PartitionStates"]]
]


class ChangelogImage:
    """One changelog partition as read so far: its runs' stored bytes and its position."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.raw: dict[str, bytes] = {}
        self.position: tuple[int, float | None] | None = None
        # A position record in a shape this version does not read (UnreadablePosition).
        self.unreadable = False

    def take(self, records: list[ConsumerRecord]) -> None:
        raw = self.raw
        for record in records:
            if record.key == POSITION_KEY:
                try:
                    self.position = decode_position(record.value)
                except (ValueError, TypeError, IndexError, AttributeError):
                    self.unreadable = True
            elif record.key.startswith(CONTROL_KEY_PREFIX):
                continue
            elif record.value is None:
                raw.pop(record.key.decode(), None)
            else:
                raw[record.key.decode()] = record.value

    def states(self, quota: RunQuota | None = None) -> PartitionStates:
        """Its states to serve from (their own copy of the bytes read)."""
        position, clock = self.position or (None, None)
        return PartitionStates(dict(self.raw), position, clock, quota)


async def restore(
    settings: Settings, partitions: list[int], on_progress: Callable[[], None], quota: RunQuota | None = None
) -> dict[int, PartitionStates]:
    """Read the partitions' changelog from the start to its end, in one reader for them all.

    `on_progress` is called after every fetch: a long restore is progress, not a hang.
    Read committed: a state whose transaction was aborted (its worker died mid-batch) is
    never restored, so states match the committed input offsets exactly.
    """
    started = time.monotonic()
    images = {p: ChangelogImage(p) for p in partitions}
    consumer = committed_reader(
        aiokafka_options(settings),
        fetch_max_bytes=RESTORE_FETCH_BYTES,
        max_partition_fetch_bytes=RESTORE_FETCH_BYTES,
    )

    def take(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        image = images[tp.partition]
        image.take(records)
        if image.unreadable:
            raise UnreadablePosition(tp.partition)

    try:
        await consumer.start()
        tps = [TopicPartition(settings.changelog_topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await read_to_end(consumer, tps, take, max_records=100_000, on_fetch=on_progress)
    finally:
        await consumer.stop()
    log.info(
        "restored %d runs of partitions %s in %.2f s",
        sum(len(image.raw) for image in images.values()),
        partitions,
        time.monotonic() - started,
    )
    return {partition: image.states(quota) for partition, image in images.items()}
