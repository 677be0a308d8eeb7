"""A pipeline stopped while an assignment is under way: under the group model a tenant's view
runs the assignment in a task of its own, beside the worker's stop."""

from __future__ import annotations

import asyncio

from stallwatch.settings import Settings
from stallwatch_streams.worker.store import PartitionStates
from tests.streams.worker.fake_tasks import FakePipeline
from tests.waiting import until

SETTINGS = Settings(topic_prefix="t")


async def test_a_stop_during_an_assignment_closes_its_tasks_once_the_assignment_ended():
    restoring = asyncio.Event()
    release = asyncio.Event()

    async def slow_restore(partitions: list[int], tick: object) -> dict[int, PartitionStates]:
        restoring.set()
        await release.wait()
        return {partition: PartitionStates() for partition in partitions}

    fake = FakePipeline(SETTINGS, restore=slow_restore)
    assignment = asyncio.create_task(fake.assigned())
    await asyncio.wait_for(restoring.wait(), 5)
    stopping = asyncio.create_task(fake.pipeline.stop(5.0))
    await until(lambda: fake.consumer.stopped, 5, "the consumer left the group")
    assert not stopping.done()  # the tasks' close waits for the assignment
    release.set()
    await asyncio.wait_for(assignment, 5)  # ends whole: its tasks were not closed under it
    assert await asyncio.wait_for(stopping, 5)
    assert len(fake.pipeline.tasks) == 0
