"""The worker's start-up objects are kept out of the cyclic collector's full collections."""

from __future__ import annotations

import gc

from stallwatch_streams.worker.service import freeze_startup_heap


def test_what_is_alive_at_start_is_frozen_and_a_later_cycle_is_still_collected() -> None:
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()

        class Node:
            def __init__(self) -> None:
                self.other: Node | None = None

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after the freeze, as a tenant's would be
        del a, b
        assert gc.collect() >= 2  # found and freed: not frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
