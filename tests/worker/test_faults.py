"""The fault matrix on a real broker: kills under load, a zombie fenced off, a hung worker."""

from __future__ import annotations

import pytest

from tests.worker.faults import three_kills

pytestmark = pytest.mark.kafka


async def test_three_kills_under_steady_load_one_during_a_rebalance_change_no_decision():
    outcome = await three_kills()
    assert len(outcome.kills) == 3
    assert outcome.exact, (f"{len(outcome.differing)} of {outcome.runs} runs differ from replay "
                           f"(e.g. {outcome.differing[:3]}), {len(outcome.doubled)} command ids "
                           f"published twice (e.g. {outcome.doubled[:3]})")
