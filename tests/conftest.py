"""What every test shares: a failed test shows the logs of the processes it started."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

# The suite starts many Python processes (two workers, the console script as a user runs it):
# where bytecode caching is off (PYTHONDONTWRITEBYTECODE, as in many container images) each one
# would compile the project's modules and rewrite the tests' asserts anew, most of the time
# collecting takes. A run writes them once into __pycache__ (ignored by git); later processes read them.
sys.dont_write_bytecode = False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """How `make test` spreads tests over pytest-xdist's workers (`--dist loadgroup`): the tests
    of one group run in one worker, one after another. Tests that disrupt the shared broker form
    one group, the cluster's another; tests that share one more thing say so with their own mark
    (the secure broker, the outage broker, the `CuttableLink` port); every other test of a broker
    or a process keeps its module together (a module-scoped worker process starts once, and its
    tests never race each other); pure tests go wherever a worker is free."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if item.get_closest_marker("solo"):
            item.add_marker(pytest.mark.xdist_group("solo"))
        elif item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group("cluster"))
        elif item.get_closest_marker("kafka") or item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


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
    shows once in many runs (and in CI) can then be read, not guessed. A process a wider
    fixture started (a module's workers) gives what it logged during the test. Only a test whose
    module loaded the broker harness can start one: the pure lane never loads it."""
    harness = sys.modules.get("tests.kafka_harness")
    if harness is None:
        yield
        return
    started = harness.StallwatchProcess.started
    before = len(started)
    serving = [(process, process.log_size()) for process in started if process.alive()]
    yield
    if request.node.stash.get(CALL_FAILED, False):
        for process, since in serving:
            said = "\n".join(process.log_path.read_text(errors="replace")[since:].splitlines()[-80:])
            request.node.add_report_section("teardown", f"log {process.log_path}, during the test", said)
        for process in started[before:]:
            request.node.add_report_section("teardown", f"log {process.log_path}", process.log_tail(80))
    del started[before:]
