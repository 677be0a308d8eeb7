"""Events the fleet app's flow control drops when it resumes are read again, without a broker:
mode's real flow control and queues, Faust's real events, a consumer that records its seeks."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from faust.events import Event
from faust.types import TP
from faust.types.tuples import Message
from mode.utils.queues import FlowControlEvent, FlowControlQueue

from stallwatch_streams.fleet.transport import first_queued_offsets, reread_what_resume_drops

TALLIES = TP("tallies", 0)
OTHER = TP("tallies", 1)


def event(tp: TP, offset: int) -> Event:
    message = Message(tp.topic, tp.partition, offset, 0.0, 0, None, b"k", b"v", None, tp=tp)
    return Event(None, b"k", b"v", None, message)  # type: ignore[arg-type]


class Consumer:
    """Positions per partition, and the seeks made."""

    def __init__(self, positions: dict[TP, int]) -> None:
        self.positions = positions
        self.seeks: list[tuple[TP, int]] = []

    async def position(self, tp: TP) -> int | None:
        return self.positions.get(tp)

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.positions[tp] = offset


def app_with(consumer: Consumer) -> tuple[SimpleNamespace, FlowControlQueue]:
    flow = FlowControlEvent()
    app = SimpleNamespace(flow_control=flow, consumer=consumer)
    reread_what_resume_drops(app)
    return app, FlowControlQueue(flow_control=flow, clear_on_resume=True)


async def until_idle() -> None:
    """A few turns of the loop, no wait on the clock: the callbacks a resume scheduled run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_events_a_resume_drops_are_read_again_from_the_first_of_each_partition() -> None:
    consumer = Consumer({TALLIES: 12, OTHER: 30})
    app, queue = app_with(consumer)
    for tp, offset in [(TALLIES, 9), (TALLIES, 10), (TALLIES, 11), (OTHER, 29)]:
        queue.put_nowait(event(tp, offset))
    app.flow_control.resume()
    assert queue.empty()  # the resume still empties the queues, as Faust expects
    await until_idle()
    assert sorted(consumer.seeks) == [(TALLIES, 9), (OTHER, 29)]


async def test_a_partition_already_at_or_before_the_dropped_events_is_not_sought() -> None:
    # A stale event from before the recovery's seek to the committed offset: read again anyway,
    # and seeking forward to it would skip what lies between.
    consumer = Consumer({TALLIES: 5})
    app, queue = app_with(consumer)
    queue.put_nowait(event(TALLIES, 9))
    queue.put_nowait(event(OTHER, 3))  # no longer assigned: no position
    app.flow_control.resume()
    await until_idle()
    assert consumer.seeks == []


async def test_a_resume_with_nothing_queued_seeks_nothing() -> None:
    consumer = Consumer({TALLIES: 5})
    app, _ = app_with(consumer)
    app.flow_control.resume()
    await until_idle()
    assert consumer.seeks == []


def test_the_queues_are_read_where_mode_keeps_them() -> None:
    # Tripwire: mode's private places this reads (FlowControlEvent._queues, asyncio.Queue._queue).
    flow = FlowControlEvent()
    queue: FlowControlQueue = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    queue.put_nowait(event(TALLIES, 4))
    queue.put_nowait("not an event")
    assert first_queued_offsets(flow._queues) == {TALLIES: 4}
