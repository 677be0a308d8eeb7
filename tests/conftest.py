"""What every test shares: a failed test shows the logs of the processes it started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka_harness import StallwatchProcess


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def process_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """The tail of each child process's log, attached to the failure's report: a fault that
    shows once in many runs (and in CI) can then be read, not guessed."""
    before = len(StallwatchProcess.started)
    yield
    if request.node.stash.get(CALL_FAILED, False):
        for process in StallwatchProcess.started[before:]:
            request.node.add_report_section("teardown", f"log {process.log_path}",
                                            process.log_tail(80))
    del StallwatchProcess.started[before:]
