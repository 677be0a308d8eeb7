"""The merge step hands a batch's partials to the producer before its event time reaches a tick:
a tick sent first closed an incident before a run's partial was judged, and that run was never
told (seen under load in the incident test, one live run's advisories missing)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import orjson

from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import FleetService
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from tests.streams.fleet.harness import tally


class _Batches:
    """A stream whose take_events yields the given batches of tally records."""

    def __init__(self, batches: list[list[dict[str, Any]]]) -> None:
        self.batches = batches

    async def take_events(self, n: int, within: float) -> Any:
        for offset, batch in enumerate(self.batches):
            yield [
                SimpleNamespace(
                    message=SimpleNamespace(
                        key=tally_key("acme", "search"),
                        value=orjson.dumps(t),
                        topic="tallies",
                        partition=0,
                        offset=offset,
                    )
                )
                for t in batch
            ]


class _Partials:
    """Records the event time a tick would carry at each partial's send."""

    def __init__(self, service: FleetService) -> None:
        self.service = service
        self.sent: list[tuple[float, float]] = []  # (the partial's ts, the watermark at its send)

    async def send(self, *, key: bytes, value: bytes) -> None:
        self.sent.append((orjson.loads(value)["ts"], self.service.watermark))


async def test_a_batch_moves_the_event_time_only_after_its_partials_are_sent() -> None:
    service = FleetService(FleetSettings(base=Settings(topic_prefix="tmerge", partitions=2)))
    partials = service.partials = _Partials(service)  # type: ignore[assignment]
    now = float(int(time.time())) - 60
    batches = [
        [tally("search", now, runs=["run-1"], calls=1)],
        [tally("search", now + 1 + step, runs=["run-9"], calls=1) for step in range(11)],
    ]
    merged = [n async for n in service.merge_tallies(_Batches(batches))]  # type: ignore[arg-type]
    assert merged == [1, 11]
    assert partials.sent, "no partial sent"
    # Every partial went out while the event time still stood before it.
    assert all(watermark < ts for ts, watermark in partials.sent), partials.sent
    assert service.watermark == now + 11
